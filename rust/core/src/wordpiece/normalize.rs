//! BERT's normalizer, keeping for every output character the span of input
//! characters it stands for.
//!
//! Each step assigns spans as `tokenizers`' `NormalizedString::transform` does,
//! so offsets match that library's even where the normalizer reorders or
//! expands characters: a character that replaces one takes the span of the
//! input character at the same position (after canonical reordering that need
//! not be the one it came from), a character added after it takes the span
//! before it.
//!
//! Character classes and decompositions come from `unicode_categories` and
//! `unicode-normalization-alignments` (both Unicode 9), the tables `tokenizers`
//! itself uses: newer tables would remove, split or reorder characters that the
//! model's tokenizer keeps, and so change the vectors and offsets of texts
//! holding characters assigned since.

use unicode_categories::UnicodeCategories;
use unicode_normalization_alignments::char::{canonical_combining_class, decompose_canonical};
use unicode_normalization_alignments::UnicodeNormalization;

/// A span of input characters, `[start, end)`, counted in characters.
pub type Span = (usize, usize);

/// The four switches of `tokenizers`' `BertNormalizer`, applied in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BertNormalizer {
    /// Remove control characters, NUL and U+FFFD; turn every whitespace into a space.
    pub clean_text: bool,
    /// Put spaces around CJK ideographs, so each is a word of its own.
    pub handle_chinese_chars: bool,
    /// Decompose (NFD) and remove nonspacing marks.
    pub strip_accents: bool,
    pub lowercase: bool,
}

impl Default for BertNormalizer {
    fn default() -> Self {
        Self {
            clean_text: true,
            handle_chinese_chars: true,
            strip_accents: true,
            lowercase: true,
        }
    }
}

/// Characters, each with the span of input characters it stands for.
pub type Normalized = Vec<(char, Span)>;

impl BertNormalizer {
    /// `text` normalized; its first character is input character `first`.
    pub fn normalize(&self, text: &str, first: usize) -> Normalized {
        let mut chars: Normalized = Vec::with_capacity(text.len());
        for (i, mut c) in text.chars().enumerate() {
            if self.clean_text {
                if is_removed(c) {
                    continue;
                }
                if is_whitespace(c) {
                    c = ' ';
                }
            }
            chars.push((c, (first + i, first + i + 1)));
        }
        if self.handle_chinese_chars && chars.iter().any(|&(c, _)| is_chinese_char(c)) {
            // The spaces always separate words and never reach a token, so their
            // spans do not matter.
            let mut spaced = Vec::with_capacity(chars.len() + 16);
            for &(c, span) in &chars {
                if is_chinese_char(c) {
                    spaced.extend([(' ', span), (c, span), (' ', span)]);
                } else {
                    spaced.push((c, span));
                }
            }
            chars = spaced;
        }
        if self.strip_accents {
            chars = nfd(&chars, first);
            chars.retain(|&(c, _)| !c.is_mark_nonspacing());
        }
        if self.lowercase
            && !chars
                .iter()
                .all(|&(c, _)| c.is_ascii() && !c.is_ascii_uppercase())
        {
            let mut lower = Vec::with_capacity(chars.len());
            for &(c, span) in &chars {
                lower.extend(c.to_lowercase().map(|l| (l, span)));
            }
            chars = lower;
        }
        chars
    }
}

impl BertNormalizer {
    /// Whether a text split before `c` normalizes, piece by piece, into what the
    /// whole does. Every step but NFD maps each character alone; NFD moves a mark
    /// only within a run of marks after a starter (combining class 0), so a piece may
    /// begin with a character that stays and whose decomposition begins with a starter
    /// (not U+0F73, which becomes two marks, nor U+200B, which cleaning removes and
    /// would leave the piece to begin with the marks after it).
    pub fn may_cut_before(&self, c: char) -> bool {
        if !self.strip_accents {
            return true;
        }
        if self.clean_text && is_removed(c) {
            return false;
        }
        let mut first = None;
        decompose_canonical(c, |d| {
            first.get_or_insert(d);
        });
        first.is_some_and(|d| canonical_combining_class(d) == 0)
    }
}

/// What `clean_text` removes: NUL, U+FFFD and control characters.
fn is_removed(c: char) -> bool {
    c == '\0' || c == '\u{fffd}' || is_control(c)
}

/// Canonical decomposition (NFD), spans assigned by position.
///
/// The decomposition reorders marks by combining class and tells, for each
/// character, whether it replaces an input character or was added: the n-th
/// replacing character takes the n-th input span, an added one the span of the
/// last input character replaced before it.
fn nfd(chars: &[(char, Span)], first: usize) -> Normalized {
    if chars.iter().all(|&(c, _)| c.is_ascii()) {
        return chars.to_vec();
    }
    let text: String = chars.iter().map(|&(c, _)| c).collect();
    let mut replaced = 0;
    text.nfd()
        .map(|(d, added)| {
            let span = if added == 0 {
                replaced += 1;
                chars[replaced - 1].1
            } else if replaced == 0 {
                (first, first)
            } else {
                chars[replaced - 1].1
            };
            (d, span)
        })
        .collect()
}

/// Whitespace as BERT counts it: tab, newline and carriage return, and Unicode's White_Space.
pub fn is_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

/// Control, format and private-use characters (Cc, Cf, Co), except tab, newline, CR.
fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && c.is_other()
}

/// BERT's punctuation: every ASCII non-alphanumeric symbol, and Unicode's P* categories.
pub fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation() || c.is_punctuation()
}

/// The CJK Unified Ideographs blocks, as `tokenizers` lists them.
fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x2_0000..=0x2_A6DF
            | 0x2_A700..=0x2_B73F
            | 0x2_B740..=0x2_B81F
            | 0x2_B920..=0x2_CEAF
            | 0xF900..=0xFAFF
            | 0x2_F800..=0x2_FA1F
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: &Normalized) -> String {
        n.iter().map(|&(c, _)| c).collect()
    }

    #[test]
    fn cleans_strips_accents_and_lowercases() {
        let n = BertNormalizer::default().normalize("Héllo\u{0}\tWörld\u{200b}", 0);
        assert_eq!(text(&n), "hello world");
        // "é" became "e" but still stands for the input's "é" (character 1).
        assert_eq!(n[1], ('e', (1, 2)));
        assert_eq!(n[6], ('w', (7, 8)));
    }

    #[test]
    fn spaces_ideographs_apart() {
        let n = BertNormalizer::default().normalize("a中b", 10);
        assert_eq!(text(&n), "a 中 b");
        assert_eq!(n[2], ('中', (11, 12)));
    }

    #[test]
    fn reordered_marks_take_spans_by_position() {
        // U+0F73 decomposes to U+0F71 (class 129) + U+0F72 (class 130); the U+0301
        // (class 230) before it moves after both.
        let n = nfd(
            &[('a', (0, 1)), ('\u{301}', (1, 2)), ('\u{f73}', (2, 3))],
            0,
        );
        let got: Vec<_> = n.iter().map(|&(c, s)| (c as u32, s)).collect();
        assert_eq!(
            got,
            vec![
                (0x61, (0, 1)),
                (0xF71, (1, 2)),
                (0xF72, (1, 2)),
                (0x301, (2, 3))
            ]
        );
    }

    #[test]
    fn keeps_what_is_asked() {
        let off = BertNormalizer {
            clean_text: false,
            handle_chinese_chars: false,
            strip_accents: false,
            lowercase: false,
        };
        assert_eq!(text(&off.normalize("É\u{0}中", 0)), "É\u{0}中");
    }
}
