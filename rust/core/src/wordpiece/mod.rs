//! BERT's WordPiece tokenizer, read from a `tokenizer.json` of the `tokenizers`
//! library, giving the ids and offsets that library gives.
//!
//! For each text:
//! 1. the added tokens (`[CLS]`, `[SEP]`, ...) written in it become their ids;
//! 2. the text between them is normalized ([`BertNormalizer`]), split into
//!    words at whitespace and around every punctuation character, and each word
//!    cut into the longest vocabulary pieces from its start (pieces after the
//!    first carry the `##` prefix); a word that cannot be cut, or longer than
//!    `max_input_chars_per_word`, is one unknown token;
//! 3. the tokens are cut to `max_length` less the special tokens, which the
//!    template then puts around them.
//!
//! The text between added tokens is normalized a piece at a time (pieces of
//! about `PIECE_BYTES`, cut where normalizing the pieces apart gives what
//! normalizing the whole would, or `SEARCH_BYTES` further at most), and the
//! encoding stops once it has a token past `max_length`: a text of megabytes
//! costs what its first tokens cost.
//!
//! Offsets count characters (Python `str` indices) of the text. The attention
//! mask of an encoding is all ones and its token type ids all zeros: the
//! templates read here have type id 0 throughout.

mod config;
mod normalize;

use std::path::Path;

use rayon::prelude::*;
use rustc_hash::FxHashMap;

pub use normalize::{BertNormalizer, Span};

use crate::error::{Error, Result};

/// The bytes of text normalized at a time, at least (a piece ends at the first
/// place after them where it may): a piece's normalized characters (24 bytes
/// each) stay small, and a text cut at 256 tokens is normalized little past
/// them. Measured on SciFact's abstracts, encoding takes the time it took when a
/// text was normalized whole.
const PIECE_BYTES: usize = 2048;

/// The bytes past `PIECE_BYTES` in which a piece looks for a place where it may end;
/// without one it ends there anyway. Only a run of marks (characters whose
/// decomposition begins with a mark, combining class above 0) and of characters that
/// cleaning removes has no such place, and a text may be one run of megabytes (Zalgo
/// text): normalized whole, it took 70 bytes a character.
///
/// NFD sorts the marks of a run by class, so a run cut in two is sorted in two parts,
/// and the marks of the second part that sort before some of the first are left
/// after them. With `strip_accents` on (the default model has it, following
/// `lowercase`) nonspacing marks (Mn) are removed once sorted: a run of only those
/// normalizes to nothing in any order, and as each input character still stands for
/// one sorted character, the characters after the run keep their spans. Cut there,
/// such a run gives the ids and offsets of `tokenizers`. The marks that stay are 83
/// characters with a class the category tables do not count as nonspacing: spacing
/// ones (U+1D165 and the other musical stems, U+302E, viramas such as U+1B44) and
/// those assigned after Unicode 8 (Glagolitic U+1E000...). In a run of more than
/// `SEARCH_BYTES` holding them, their order and offsets may differ from
/// `tokenizers`' (which sorts the whole run).
const SEARCH_BYTES: usize = 64 * 1024;

/// Where a text is cut into pieces to normalize: at the first place from byte `bytes`
/// on where the normalizer may cut, else `search` bytes further.
#[derive(Clone, Copy)]
struct Pieces {
    bytes: usize,
    search: usize,
}

/// One text's tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Encoding {
    pub ids: Vec<u32>,
    /// Each token's characters in the text; `(0, 0)` for a template's special tokens.
    pub offsets: Vec<Span>,
    /// Whether tokens beyond `max_length` were cut.
    pub truncated: bool,
}

/// The vocabulary, looked up without building the prefixed string.
struct Vocab {
    /// Pieces that start a word: every entry as written.
    starts: FxHashMap<String, u32>,
    /// Pieces after the first: the entries that begin with the prefix, without it.
    continuations: FxHashMap<String, u32>,
    /// The longest key of each map, in bytes: longer pieces are not looked up.
    longest_start: usize,
    longest_continuation: usize,
}

impl Vocab {
    fn new(starts: FxHashMap<String, u32>, prefix: &str) -> Self {
        let continuations: FxHashMap<String, u32> = starts
            .iter()
            .filter_map(|(t, &id)| Some((t.strip_prefix(prefix)?.to_owned(), id)))
            .collect();
        let longest = |m: &FxHashMap<String, u32>| m.keys().map(String::len).max().unwrap_or(0);
        Self {
            longest_start: longest(&starts),
            longest_continuation: longest(&continuations),
            starts,
            continuations,
        }
    }
}

pub struct WordPiece {
    vocab: Vocab,
    unk: u32,
    max_word_chars: usize,
    normalizer: Option<BertNormalizer>,
    /// Added tokens and their ids; `added_first[b]` tells whether one starts with byte `b`.
    added: Vec<(String, u32)>,
    added_first: [bool; 256],
    /// Special tokens before and after a text's own.
    before: Vec<u32>,
    after: Vec<u32>,
    pad_id: u32,
    max_length: Option<usize>,
}

impl WordPiece {
    fn new(
        vocab: Vocab,
        unk: u32,
        max_word_chars: usize,
        normalizer: Option<BertNormalizer>,
        added: Vec<(String, u32)>,
        (before, after): (Vec<u32>, Vec<u32>),
        pad_id: u32,
    ) -> Self {
        let mut added_first = [false; 256];
        for (token, _) in &added {
            added_first[usize::from(token.as_bytes()[0])] = true;
        }
        Self {
            vocab,
            unk,
            max_word_chars,
            normalizer,
            added,
            added_first,
            before,
            after,
            pad_id,
            max_length: None,
        }
    }

    /// A tokenizer from the text of a `tokenizer.json`; a configuration this
    /// module does not read is `InvalidArgument`, with the reason.
    pub fn from_json(json: &str) -> Result<Self> {
        config::parse(json)
            .map_err(|why| Error::invalid(format!("not a BERT WordPiece tokenizer.json: {why}")))
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        let json = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        config::parse(&json).map_err(|why| {
            Error::invalid(format!(
                "{} is not a BERT WordPiece tokenizer.json: {why}",
                path.display()
            ))
        })
    }

    /// Cut every encoding to `max_length` tokens, special tokens included; `None` cuts nothing.
    #[must_use]
    pub fn with_max_length(mut self, max_length: Option<usize>) -> Self {
        self.max_length = max_length;
        self
    }

    pub fn max_length(&self) -> Option<usize> {
        self.max_length
    }

    /// The id that pads a batch (the file's padding `pad_id`, else 0).
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// Special tokens the template adds to a text.
    pub fn num_special_tokens(&self) -> usize {
        self.before.len() + self.after.len()
    }

    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Encoding {
        let pieces = Pieces {
            bytes: PIECE_BYTES,
            search: SEARCH_BYTES,
        };
        self.encode_in_pieces(text, add_special_tokens, pieces)
    }

    /// `encode`, the text normalized in `pieces`.
    fn encode_in_pieces(&self, text: &str, add_special_tokens: bool, pieces: Pieces) -> Encoding {
        let specials = if add_special_tokens {
            self.num_special_tokens()
        } else {
            0
        };
        // A limit below the special tokens cuts nothing, as in `tokenizers`.
        let limit = self.max_length.and_then(|m| m.checked_sub(specials));
        // One token past the limit says the text was cut; the others would be dropped.
        let enough = limit.map_or(usize::MAX, |l| l.saturating_add(1));
        let mut out = Encoding::default();
        self.split_added(text, |segment| {
            match segment {
                Segment::Added(id, span) => {
                    out.ids.push(id);
                    out.offsets.push(span);
                }
                Segment::Text(text, first) => {
                    self.encode_text(text, first, pieces, enough, &mut out);
                }
            }
            out.ids.len() < enough
        });
        if let Some(limit) = limit {
            if out.ids.len() > limit {
                out.ids.truncate(limit);
                out.offsets.truncate(limit);
                out.truncated = true;
            }
        }
        if add_special_tokens && specials > 0 {
            let n = out.ids.len() + specials;
            let mut ids = Vec::with_capacity(n);
            ids.extend(&self.before);
            ids.append(&mut out.ids);
            ids.extend(&self.after);
            let mut offsets = Vec::with_capacity(n);
            offsets.resize(self.before.len(), (0, 0));
            offsets.append(&mut out.offsets);
            offsets.resize(n, (0, 0));
            out.ids = ids;
            out.offsets = offsets;
        }
        out
    }

    /// `encode` of each text, in parallel.
    pub fn encode_batch<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        add_special_tokens: bool,
    ) -> Vec<Encoding> {
        crate::pool::install(|| {
            texts
                .par_iter()
                .map(|t| self.encode(t.as_ref(), add_special_tokens))
                .collect()
        })
    }

    /// Calls `f` on the added tokens found in `text` (leftmost first, the longest
    /// where several start at one place) and on the text between them, until `f`
    /// returns false.
    fn split_added<'t>(&self, text: &'t str, mut f: impl FnMut(Segment<'t>) -> bool) {
        let bytes = text.as_bytes();
        let (mut at, mut from) = (0, 0);
        // Characters before byte `counted`, and before byte `from`.
        let (mut chars, mut counted, mut from_chars) = (0, 0, 0);
        while at < bytes.len() {
            // A first byte of a token is ASCII or a UTF-8 lead byte, so `at` is a
            // character boundary whenever it matches.
            let found = if self.added_first[usize::from(bytes[at])] {
                self.added
                    .iter()
                    .filter(|(token, _)| text[at..].starts_with(token.as_str()))
                    .max_by_key(|(token, _)| token.len())
            } else {
                None
            };
            let Some((token, id)) = found else {
                at += 1;
                continue;
            };
            chars += text[counted..at].chars().count();
            if from < at && !f(Segment::Text(&text[from..at], from_chars)) {
                return;
            }
            let len = token.chars().count();
            if !f(Segment::Added(*id, (chars, chars + len))) {
                return;
            }
            chars += len;
            at += token.len();
            (counted, from, from_chars) = (at, at, chars);
        }
        if from < bytes.len() {
            f(Segment::Text(&text[from..], from_chars));
        }
    }

    /// The tokens of text with no added token in it, whose first character is
    /// character `first` of the whole text, normalized in `pieces`; stops at the word
    /// that makes `out` hold `enough` tokens.
    fn encode_text(
        &self,
        text: &str,
        first: usize,
        pieces: Pieces,
        enough: usize,
        out: &mut Encoding,
    ) {
        // The word a piece ended in, which the next one goes on with: its characters, or
        // its span once it has more than a word may (it is one unknown token then, and a
        // text of megabytes may be one word).
        let mut carried: Vec<(char, Span)> = Vec::new();
        let mut overlong: Option<Span> = None;
        let mut at = first;
        let mut rest = text;
        while !rest.is_empty() && out.ids.len() < enough {
            let piece = &rest[..self.piece_end(rest, pieces)];
            rest = &rest[piece.len()..];
            let piece_chars = match &self.normalizer {
                Some(n) => n.normalize(piece, at),
                None => piece
                    .chars()
                    .enumerate()
                    .map(|(i, c)| (c, (at + i, at + i + 1)))
                    .collect(),
            };
            at += piece.chars().count();
            let chars = if carried.is_empty() {
                piece_chars
            } else {
                carried.extend(piece_chars);
                std::mem::take(&mut carried)
            };
            let mut normalized = String::with_capacity(chars.len());
            let mut bytes = Vec::with_capacity(chars.len() + 1);
            for &(c, _) in &chars {
                bytes.push(normalized.len());
                normalized.push(c);
            }
            bytes.push(normalized.len());
            let word = Word {
                text: &normalized,
                bytes: &bytes,
                chars: &chars,
            };

            let mut start = None;
            for (i, &(c, _)) in chars.iter().enumerate() {
                let punctuation = normalize::is_punctuation(c);
                if c.is_whitespace() || punctuation {
                    if let Some((from, to)) = overlong.take() {
                        let to = if i > 0 { chars[i - 1].1 .1 } else { to };
                        out.ids.push(self.unk);
                        out.offsets.push((from, to));
                    } else if let Some(s) = start.take() {
                        self.word_pieces(&word, s, i, out);
                    }
                    if punctuation {
                        self.word_pieces(&word, i, i + 1, out);
                    }
                    if out.ids.len() >= enough {
                        return;
                    }
                } else if start.is_none() && overlong.is_none() {
                    start = Some(i);
                }
            }
            let n = chars.len();
            if let Some(long) = &mut overlong {
                if n > 0 {
                    long.1 = chars[n - 1].1 .1;
                }
            } else if let Some(s) = start {
                if rest.is_empty() {
                    self.word_pieces(&word, s, n, out);
                } else if n - s > self.max_word_chars {
                    overlong = Some((chars[s].1 .0, chars[n - 1].1 .1));
                } else {
                    carried.extend_from_slice(&chars[s..]);
                }
            }
            if rest.is_empty() {
                if let Some(span) = overlong.take() {
                    out.ids.push(self.unk);
                    out.offsets.push(span);
                }
            }
        }
    }

    /// Where the first piece of `text` ends: the whole text if it is short, else the
    /// first character from byte `pieces.bytes` on before which the normalizer may
    /// cut, else the character `pieces.search` bytes further.
    fn piece_end(&self, text: &str, pieces: Pieces) -> usize {
        if text.len() <= pieces.bytes {
            return text.len();
        }
        let boundary = |mut at: usize| {
            while !text.is_char_boundary(at) {
                at += 1;
            }
            at
        };
        let from = boundary(pieces.bytes);
        let to = boundary(pieces.bytes.saturating_add(pieces.search).min(text.len()));
        text[from..to]
            .char_indices()
            .find(|&(_, c)| self.normalizer.as_ref().is_none_or(|n| n.may_cut_before(c)))
            .map_or(to, |(i, _)| from + i)
    }

    /// The longest vocabulary pieces of characters `a..b`, from the start; one
    /// unknown token if they cannot all be cut or are too many.
    fn word_pieces(&self, word: &Word<'_>, a: usize, b: usize, out: &mut Encoding) {
        let span = |i: usize, j: usize| (word.chars[i].1 .0, word.chars[j - 1].1 .1);
        if b - a > self.max_word_chars {
            out.ids.push(self.unk);
            out.offsets.push(span(a, b));
            return;
        }
        let mark = out.ids.len();
        let mut i = a;
        while i < b {
            let (pieces, longest) = if i == a {
                (&self.vocab.starts, self.vocab.longest_start)
            } else {
                (&self.vocab.continuations, self.vocab.longest_continuation)
            };
            let mut j = b;
            while j > i && word.bytes[j] - word.bytes[i] > longest {
                j -= 1;
            }
            let found = loop {
                if j == i {
                    break None;
                }
                if let Some(&id) = pieces.get(&word.text[word.bytes[i]..word.bytes[j]]) {
                    break Some(id);
                }
                j -= 1;
            };
            let Some(id) = found else {
                out.ids.truncate(mark);
                out.offsets.truncate(mark);
                out.ids.push(self.unk);
                out.offsets.push(span(a, b));
                return;
            };
            out.ids.push(id);
            out.offsets.push(span(i, j));
            i = j;
        }
    }
}

enum Segment<'t> {
    /// An added token's id and its characters.
    Added(u32, Span),
    /// Text between added tokens, and the index of its first character.
    Text(&'t str, usize),
}

/// A normalized piece of text: its string, each character's byte offset in it (and
/// its length last), and each character with its span in the input.
struct Word<'a> {
    text: &'a str,
    bytes: &'a [usize],
    chars: &'a [(char, Span)],
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r###"{
        "added_tokens": [
            {"id": 0, "content": "[PAD]", "special": true, "normalized": false,
             "lstrip": false, "rstrip": false, "single_word": false},
            {"id": 1, "content": "[UNK]", "special": true, "normalized": false,
             "lstrip": false, "rstrip": false, "single_word": false},
            {"id": 2, "content": "[CLS]", "special": true, "normalized": false,
             "lstrip": false, "rstrip": false, "single_word": false},
            {"id": 3, "content": "[SEP]", "special": true, "normalized": false,
             "lstrip": false, "rstrip": false, "single_word": false}
        ],
        "normalizer": {"type": "BertNormalizer", "clean_text": true,
                       "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 9,
                  "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "un": 4,
                            "##aff": 5, "##able": 6, "!": 7, "cafe": 8, "中": 9, "a": 10}}
    }"###;

    fn tokenizer() -> WordPiece {
        WordPiece::from_json(JSON).unwrap()
    }

    /// The text normalized whole, as `tokenizers` does.
    const WHOLE: Pieces = Pieces {
        bytes: usize::MAX,
        search: 0,
    };

    #[test]
    fn cuts_words_into_the_longest_pieces() {
        let e = tokenizer().encode("Unaffable!", true);
        assert_eq!(e.ids, vec![2, 4, 5, 6, 7, 3]);
        assert_eq!(
            e.offsets,
            vec![(0, 0), (0, 2), (2, 5), (5, 9), (9, 10), (0, 0)]
        );
        assert!(!e.truncated);
    }

    #[test]
    fn unknown_words_and_long_words_are_one_unknown_token() {
        let e = tokenizer().encode("unx aaaaaaaaaa Café", false);
        assert_eq!(e.ids, vec![1, 1, 8]);
        assert_eq!(e.offsets, vec![(0, 3), (4, 14), (15, 19)]);
    }

    #[test]
    fn added_tokens_are_found_in_the_text() {
        let e = tokenizer().encode("中[SEP]a[sep]", false);
        assert_eq!(e.ids[..3], [9, 3, 10]);
        assert_eq!(e.offsets[..3], [(0, 1), (1, 6), (6, 7)]);
        // Lowercase is not the token: "[", "sep", "]" (unknown "sep").
        assert_eq!(e.ids[3..], [1, 1, 1]);
    }

    #[test]
    fn truncation_leaves_room_for_the_special_tokens() {
        let wp = tokenizer().with_max_length(Some(3));
        let e = wp.encode("un un", true);
        assert_eq!(e.ids, vec![2, 4, 3]);
        assert!(e.truncated);
        assert!(!wp.encode("un", true).truncated);
        // Too small a limit for the special tokens cuts nothing.
        let e = tokenizer().with_max_length(Some(1)).encode("un un", true);
        assert_eq!((e.ids.len(), e.truncated), (4, false));
        assert_eq!(tokenizer().encode("", true).ids, vec![2, 3]);
    }

    #[test]
    fn batches_equal_single_texts() {
        let wp = tokenizer();
        let texts = ["un", "", "Unaffable", "中 a"];
        let batch = wp.encode_batch(&texts, true);
        for (text, e) in texts.iter().zip(batch) {
            assert_eq!(wp.encode(text, true), e);
        }
    }

    #[test]
    fn a_huge_text_gives_the_tokens_of_its_start() {
        let wp = tokenizer().with_max_length(Some(8));
        let huge = "Unaffable un! 中a ".repeat(1_000_000);
        let start: String = huge.chars().take(40).collect();
        let (got, want) = (wp.encode(&huge, true), wp.encode(&start, true));
        assert_eq!(got, want);
        assert!(got.truncated);
        // One word of millions of characters is one unknown token spanning them all.
        let word = "a".repeat(3_000_000);
        let e = wp.encode(&format!("{word} un"), true);
        assert_eq!(e.ids, vec![2, 1, 4, 3]);
        assert_eq!(e.offsets[1..3], [(0, 3_000_000), (3_000_001, 3_000_003)]);
    }

    #[test]
    fn pieces_normalize_as_the_whole_text() {
        // Only the order of the marks NFD keeps shows in the tokens (the nonspacing ones
        // go with the accents): "x" with U+1D165 (class 216) then U+1D16D (class 226),
        // the order NFD sorts them into, is a piece of its own.
        let json = JSON.replace(r#""a": 10}"#, "\"a\": 10, \"x\u{1d165}\u{1d16d}\": 11}");
        let wp = WordPiece::from_json(&json).unwrap();
        assert_eq!(wp.encode("X\u{1d16d}\u{1d165}", false).ids, vec![11]);
        // Those marks with a character that decomposes into marks (U+0F73) or that
        // cleaning removes (U+200B) between them, ideographs, punctuation, words near
        // the length limit (9), an added token: every text of four of these, cut
        // wherever a piece may end, gives the tokens and offsets of the uncut text.
        let alphabet = [
            "x",
            "\u{1d16d}",
            "\u{1d165}",
            "\u{f73}",
            "\u{200b}",
            "\u{301}",
            " ",
            "中",
            "!",
            "É",
            "un",
            "aaaa",
            "[SEP]",
        ];
        let mut texts = vec![String::new()];
        for _ in 0..4 {
            texts = texts
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
        }
        for text in &texts {
            for special in [true, false] {
                let whole = wp.encode_in_pieces(text, special, WHOLE);
                let cut = Pieces {
                    bytes: 1,
                    search: usize::MAX,
                };
                assert_eq!(wp.encode_in_pieces(text, special, cut), whole, "{text:?}");
            }
        }
    }

    #[test]
    fn a_run_of_marks_is_cut_within_the_search() {
        let wp = tokenizer();
        let pieces = Pieces {
            bytes: PIECE_BYTES,
            search: SEARCH_BYTES,
        };
        for run in ["\u{301}", "\u{200b}\u{f73}", "\u{0}"] {
            let text = format!("un {}a un", run.repeat(100_000));
            let end = wp.piece_end(&text, pieces);
            // Within the run (before "a un"), and a character is at most four bytes.
            assert!(end < text.len() - 4, "{end}");
            assert!(end <= PIECE_BYTES + SEARCH_BYTES + 3, "{end}");
            assert_eq!(
                wp.encode(&text, true),
                wp.encode_in_pieces(&text, true, WHOLE)
            );
        }
    }

    #[test]
    fn cuts_in_runs_of_nonspacing_marks_change_nothing() {
        // Nonspacing marks of classes 1, 202, 220 and 230, two that decompose into two
        // marks, characters that cleaning removes, and the rest of what a word may hold:
        // every text of four of these, cut after every character, gives the tokens and
        // offsets of the uncut text.
        let wp = tokenizer();
        let alphabet = [
            "x", "\u{336}", "\u{327}", "\u{317}", "\u{301}", "\u{344}", "\u{f73}", "\u{200b}",
            "\u{0}", " ", "中", "É", "aaaa", "[SEP]",
        ];
        let mut texts = vec![String::new()];
        for _ in 0..4 {
            texts = texts
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
        }
        let everywhere = Pieces {
            bytes: 1,
            search: 0,
        };
        for text in &texts {
            for special in [true, false] {
                let whole = wp.encode_in_pieces(text, special, WHOLE);
                let cut = wp.encode_in_pieces(text, special, everywhere);
                assert_eq!(cut, whole, "{text:?}");
            }
        }
    }

    #[test]
    fn other_configurations_are_refused_with_the_reason() {
        let bpe = JSON.replace(r#""type": "WordPiece""#, r#""type": "BPE""#);
        let err = WordPiece::from_json(&bpe).err().unwrap().to_string();
        assert!(err.contains("its model is BPE"), "{err}");
        let lstrip = JSON.replacen(r#""lstrip": false"#, r#""lstrip": true"#, 1);
        let err = WordPiece::from_json(&lstrip).err().unwrap().to_string();
        assert!(err.contains(r#""[PAD]" is lstrip"#), "{err}");
        let err = WordPiece::from_json("[").err().unwrap().to_string();
        assert!(err.contains("invalid JSON"), "{err}");
    }
}
