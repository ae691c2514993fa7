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
//! normalizing the whole would), and the encoding stops once it has a token
//! past `max_length`: a text of megabytes costs what its first tokens cost.
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
        self.encode_in_pieces(text, add_special_tokens, PIECE_BYTES)
    }

    /// `encode`, the text normalized in pieces of `piece_bytes` bytes at least.
    fn encode_in_pieces(
        &self,
        text: &str,
        add_special_tokens: bool,
        piece_bytes: usize,
    ) -> Encoding {
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
                    self.encode_text(text, first, piece_bytes, enough, &mut out);
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
    /// character `first` of the whole text, normalized in pieces of `piece_bytes`
    /// bytes at least; stops at the word that makes `out` hold `enough` tokens.
    fn encode_text(
        &self,
        text: &str,
        first: usize,
        piece_bytes: usize,
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
            let piece = &rest[..self.piece_end(rest, piece_bytes)];
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
    /// first character from byte `piece_bytes` on before which the normalizer may cut.
    fn piece_end(&self, text: &str, piece_bytes: usize) -> usize {
        if text.len() <= piece_bytes {
            return text.len();
        }
        let mut from = piece_bytes;
        while !text.is_char_boundary(from) {
            from += 1;
        }
        text[from..]
            .char_indices()
            .find(|&(_, c)| self.normalizer.as_ref().is_none_or(|n| n.may_cut_before(c)))
            .map_or(text.len(), |(i, _)| from + i)
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
                let whole = wp.encode_in_pieces(text, special, usize::MAX);
                assert_eq!(wp.encode_in_pieces(text, special, 1), whole, "{text:?}");
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
