//! Text to terms: Unicode word segmentation (UAX #29), lowercasing, stopword
//! removal, Snowball stemming and optional accent folding, in that order.
//!
//! Scripts written without spaces (Han, Hiragana, Thai, Lao, Khmer, Myanmar)
//! come out of UAX #29 one character at a time; a run of such characters is
//! indexed as overlapping bigrams (a lone character as itself), as Lucene's
//! CJK analyzer does, so "東京都" gives "東京", "京都". Katakana and Hangul
//! words are kept whole. Emoji and punctuation are not words and are dropped.
//! A token longer than [`MAX_TOKEN_CHARS`] is cut to that length, so a
//! megabyte without a space costs one short term. A word that UAX #29 keeps
//! whole across a full stop or colon between letters ("disabilities.A",
//! "e.g") is split there; numbers such as "3.5" stay whole.

use parking_lot::RwLock;
use rust_stemmers::Stemmer;
use rustc_hash::{FxHashMap, FxHashSet};
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;
use unicode_segmentation::UnicodeSegmentation;

use super::language::Language;

/// Tokens are cut to this many characters (before stemming).
pub const MAX_TOKEN_CHARS: usize = 64;

/// Which words are dropped before stemming.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopwords {
    None,
    /// The language's built-in list.
    Language,
    /// A caller's list; matched after lowercasing.
    Custom(Vec<String>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnalyzerConfig {
    pub language: Language,
    pub stopwords: Stopwords,
    pub stemming: bool,
    /// Strip diacritics (NFD, then drop combining marks) after stemming, so
    /// that "café" and "cafe" meet while the stemmer still sees the accents.
    pub fold_accents: bool,
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        AnalyzerConfig {
            language: Language::English,
            stopwords: Stopwords::Language,
            stemming: true,
            fold_accents: false,
        }
    }
}

/// The terms of one text, stored back to back in one string.
#[derive(Default, Debug)]
pub struct Tokens {
    text: String,
    ends: Vec<usize>,
}

impl Tokens {
    pub fn clear(&mut self) {
        self.text.clear();
        self.ends.clear();
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(s, e)| &self.text[s..e])
    }

    fn push(&mut self, token: &str) {
        if !token.is_empty() {
            self.text.push_str(token);
            self.ends.push(self.text.len());
        }
    }
}

/// Memoises the word-to-term pipeline (stopword test, stemming, folding),
/// as bm25s does with its stem cache: Snowball stemming costs about half a
/// microsecond a word, a look-up a few dozen nanoseconds.
#[derive(Default)]
pub struct TermCache {
    map: FxHashMap<Box<str>, Option<Box<str>>>,
}

impl TermCache {
    /// The cache is dropped and restarted past this many words, and longer
    /// words are not kept, which bounds its memory on adversarial input.
    const MAX_ENTRIES: usize = 1 << 17;
    const MAX_WORD_BYTES: usize = 4 * MAX_TOKEN_CHARS;

    fn get(&self, word: &str) -> Option<&Option<Box<str>>> {
        self.map.get(word)
    }

    fn insert(&mut self, word: &str, term: Option<Box<str>>) {
        if word.len() > Self::MAX_WORD_BYTES {
            return;
        }
        if self.map.len() >= Self::MAX_ENTRIES {
            self.map.clear();
        }
        self.map.insert(Box::from(word), term);
    }
}

pub struct Analyzer {
    config: AnalyzerConfig,
    stop: FxHashSet<Box<str>>,
    stemmer: Option<Stemmer>,
    /// Shared by every call made without a cache of its own (queries, small
    /// adds); batches bring a per-thread cache and never lock this one.
    shared: RwLock<TermCache>,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer")
            .field("config", &self.config)
            .finish()
    }
}

impl Clone for Analyzer {
    fn clone(&self) -> Self {
        Analyzer::new(self.config.clone())
    }
}

impl Default for Analyzer {
    fn default() -> Self {
        Analyzer::new(AnalyzerConfig::default())
    }
}

impl Analyzer {
    pub fn new(config: AnalyzerConfig) -> Self {
        let stop = match &config.stopwords {
            Stopwords::None => FxHashSet::default(),
            Stopwords::Language => config
                .language
                .stopwords()
                .iter()
                .map(|w| Box::from(*w))
                .collect(),
            Stopwords::Custom(words) => words
                .iter()
                .map(|w| lowercase(w).into_boxed_str())
                .collect(),
        };
        let stemmer = config
            .stemming
            .then(|| Stemmer::create(config.language.algorithm()));
        Analyzer {
            config,
            stop,
            stemmer,
            shared: RwLock::new(TermCache::default()),
        }
    }

    pub fn config(&self) -> &AnalyzerConfig {
        &self.config
    }

    /// The terms of `text`, in order, repeats kept.
    pub fn analyze(&self, text: &str) -> Vec<String> {
        let mut out = Tokens::default();
        self.tokens(text, &mut out, None);
        out.iter().map(str::to_owned).collect()
    }

    /// Appends the terms of `text` to `out`; a batch passes a `cache` of its
    /// own so that threads do not share one.
    pub fn tokens(&self, text: &str, out: &mut Tokens, mut cache: Option<&mut TermCache>) {
        // The pending character of a run of spaceless script: (end offset, text, run length).
        let mut run: Option<(usize, &str, usize)> = None;
        let mut lower = String::new();
        for (start, word) in text.unicode_word_indices() {
            // A combining mark after a space or a control character joins it to a
            // word (UAX #29, WB4); neither is part of a term.
            let trimmed = word.trim_start_matches(is_separator);
            let start = start + (word.len() - trimmed.len());
            let word = trimmed.trim_end_matches(is_separator);
            if word.is_empty() {
                continue;
            }
            if is_spaceless(word) {
                match run {
                    Some((end, prev, len)) if end == start => {
                        let mut bigram = String::with_capacity(prev.len() + word.len());
                        bigram.push_str(prev);
                        bigram.push_str(word);
                        self.push_plain(&bigram, out);
                        run = Some((start + word.len(), word, len + 1));
                    }
                    _ => {
                        self.flush_run(run, out);
                        run = Some((start + word.len(), word, 1));
                    }
                }
                continue;
            }
            self.flush_run(run.take(), out);
            for part in split_joined(word) {
                lower.clear();
                lowercase_into(part, &mut lower);
                self.push_word(&lower, out, cache.as_deref_mut());
            }
        }
        self.flush_run(run, out);
    }

    /// Pushes the term of one lowercased word, through `cache` or else the shared one.
    fn push_word(&self, lower: &str, out: &mut Tokens, cache: Option<&mut TermCache>) {
        let push = |out: &mut Tokens, term: &Option<Box<str>>| {
            if let Some(term) = term {
                out.push(term);
            }
        };
        match cache {
            Some(cache) => {
                if let Some(term) = cache.get(lower) {
                    return push(out, term);
                }
                let term = self.term(lower).map(String::into_boxed_str);
                push(out, &term);
                cache.insert(lower, term);
            }
            None => {
                if let Some(term) = self.shared.read().get(lower) {
                    return push(out, term);
                }
                let term = self.term(lower).map(String::into_boxed_str);
                push(out, &term);
                self.shared.write().insert(lower, term);
            }
        }
    }

    /// A lone spaceless character is indexed as itself; runs were indexed as bigrams.
    fn flush_run(&self, run: Option<(usize, &str, usize)>, out: &mut Tokens) {
        if let Some((_, word, 1)) = run {
            self.push_plain(word, out);
        }
    }

    fn push_plain(&self, token: &str, out: &mut Tokens) {
        if self.config.fold_accents {
            out.push(&fold(token));
        } else {
            out.push(token);
        }
    }

    /// The term of one lowercased word, or `None` for a stopword.
    fn term(&self, word: &str) -> Option<String> {
        let mut word = word.to_owned();
        if word.contains(['\u{2019}', '\u{2018}', '\u{02bc}']) {
            word = word.replace(['\u{2019}', '\u{2018}', '\u{02bc}'], "'");
        }
        if let Some((cut, _)) = word.char_indices().nth(MAX_TOKEN_CHARS) {
            word.truncate(cut);
        }
        if self.stop.contains(word.as_str()) {
            return None;
        }
        if let Some(stemmer) = &self.stemmer {
            word = stemmer.stem(&word).into_owned();
        }
        if self.config.fold_accents {
            word = fold(&word);
        }
        (!word.is_empty()).then_some(word)
    }
}

/// A character that separates terms however a combining mark attaches to it:
/// white space, and control characters (U+001C..U+001F separate records).
fn is_separator(c: char) -> bool {
    c.is_whitespace() || c.is_control()
}

/// Splits a UAX #29 word at a full stop or colon between two letters:
/// UAX #29 keeps "disabilities.A" (a sentence joined without a space) and
/// "e.g" whole, which costs recall; numbers such as "3.5" stay whole.
fn split_joined(word: &str) -> impl Iterator<Item = &str> {
    let mut rest = if word.contains(['.', ':']) { word } else { "" };
    let mut whole = (rest.is_empty()).then_some(word);
    std::iter::from_fn(move || {
        if let Some(w) = whole.take() {
            return Some(w);
        }
        while !rest.is_empty() {
            let cut = rest.char_indices().find(|&(i, c)| {
                matches!(c, '.' | ':')
                    && rest[..i]
                        .chars()
                        .next_back()
                        .is_some_and(|p| p.is_alphabetic())
                    && rest[i + 1..]
                        .chars()
                        .next()
                        .is_some_and(|n| n.is_alphabetic())
            });
            let (part, next) = match cut {
                Some((i, _)) => (&rest[..i], &rest[i + 1..]),
                None => (rest, ""),
            };
            rest = next;
            if !part.is_empty() {
                return Some(part);
            }
        }
        None
    })
}

fn lowercase_into(word: &str, out: &mut String) {
    if word.is_ascii() {
        out.extend(word.bytes().map(|b| char::from(b.to_ascii_lowercase())));
    } else {
        out.push_str(&word.to_lowercase());
    }
}

fn lowercase(word: &str) -> String {
    let mut s = String::with_capacity(word.len());
    lowercase_into(word, &mut s);
    s
}

/// True for a word of a script written without spaces, which UAX #29 hands
/// out one character (grapheme) at a time.
fn is_spaceless(word: &str) -> bool {
    let Some(c) = word.chars().next() else {
        return false;
    };
    matches!(c as u32,
        0x0E00..=0x0EFF // Thai, Lao
        | 0x1000..=0x109F // Myanmar
        | 0x1780..=0x17FF // Khmer
        | 0x19E0..=0x19FF // Khmer symbols
        | 0x3005..=0x3007 // ideographic iteration mark, closing mark, zero
        | 0x3040..=0x309F // Hiragana
        | 0x3400..=0x4DBF // CJK extension A
        | 0x4E00..=0x9FFF // CJK unified ideographs
        | 0xA9E0..=0xA9FF // Myanmar extended-B
        | 0xAA60..=0xAA7F // Myanmar extended-A
        | 0xF900..=0xFAFF // CJK compatibility ideographs
        | 0x20000..=0x3FFFF // CJK extensions B and later
    )
}

/// Removes diacritics: canonical decomposition without the combining marks,
/// plus the Latin letters whose base letter is not a decomposition.
fn fold(token: &str) -> String {
    if token.is_ascii() {
        return token.to_owned();
    }
    let mut out = String::with_capacity(token.len());
    for c in token.nfd() {
        if is_combining_mark(c) {
            continue;
        }
        match c {
            'ß' => out.push_str("ss"),
            'æ' => out.push_str("ae"),
            'œ' => out.push_str("oe"),
            'ø' => out.push('o'),
            'ł' => out.push('l'),
            'đ' | 'ð' => out.push('d'),
            'þ' => out.push_str("th"),
            'ı' => out.push('i'),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn english() -> Analyzer {
        Analyzer::default()
    }

    fn with(f: impl FnOnce(&mut AnalyzerConfig)) -> Analyzer {
        let mut c = AnalyzerConfig::default();
        f(&mut c);
        Analyzer::new(c)
    }

    #[test]
    fn english_pipeline() {
        assert_eq!(english().analyze("Running quickly!"), ["run", "quick"]);
        assert_eq!(
            english().analyze("The patient’s generalizations, and IL-6."),
            ["patient", "general", "il", "6"]
        );
        assert!(english().analyze("the and of it is").is_empty());
        assert!(english().analyze("").is_empty());
    }

    #[test]
    fn joined_sentences_split_numbers_do_not() {
        assert_eq!(
            english().analyze("disabilities.A line, e.g. 3.5 mg, ratio 1:2, foo:bar"),
            ["disabl", "line", "e", "g", "3.5", "mg", "ratio", "1", "2", "foo", "bar"]
        );
    }

    #[test]
    fn stopword_and_stemming_switches() {
        let none = with(|c| {
            c.stopwords = Stopwords::None;
            c.stemming = false;
        });
        assert_eq!(none.analyze("The Running"), ["the", "running"]);
        let custom = with(|c| c.stopwords = Stopwords::Custom(vec!["RUNNING".into()]));
        assert_eq!(custom.analyze("the running dog"), ["the", "dog"]);
    }

    #[test]
    fn spaceless_scripts_become_bigrams() {
        let a = english();
        assert_eq!(a.analyze("東京都"), ["東京", "京都"]);
        assert_eq!(a.analyze("東 京"), ["東", "京"]);
        assert_eq!(a.analyze("猫"), ["猫"]);
        // Katakana stays one word and breaks the Han run.
        assert_eq!(a.analyze("東京カタカナ都"), ["東京", "カタカナ", "都"]);
        let thai = a.analyze("ภาษาไทย");
        assert_eq!(thai.len(), 6);
        assert!(thai.iter().all(|t| t.chars().count() == 2));
    }

    #[test]
    fn any_script_without_error() {
        let a = english();
        assert_eq!(a.analyze("한국어 텍스트"), ["한국어", "텍스트"]);
        assert_eq!(a.analyze("שלום עולם"), ["שלום", "עולם"]);
        assert_eq!(a.analyze("👍🏽 hello🎉world\0x"), ["hello", "world", "x"]);
        assert_eq!(
            a.analyze("e\u{301}t\u{301}e"),
            a.analyze("E\u{301}T\u{301}E")
        );
        // A space before a combining mark is not part of any term.
        assert!(a.analyze("a \u{345}b").iter().all(|t| !t.contains(' ')));
        // Nor is a control character before one.
        assert_eq!(a.analyze("\u{1f}\u{11a51}"), ["\u{11a51}"]);
        let greek = with(|c| c.language = Language::Greek);
        assert!(!greek.analyze("ΟΔΥΣΣΕΥΣ").is_empty());
    }

    #[test]
    fn folding_after_stemming() {
        let fold = with(|c| {
            c.language = Language::French;
            c.fold_accents = true;
        });
        assert_eq!(fold.analyze("café"), fold.analyze("cafe"));
        assert_eq!(super::fold("straße øre"), "strasse ore");
        assert_eq!(english().analyze("café"), ["café"]);
    }

    #[test]
    fn huge_token_is_cut() {
        let a = with(|c| c.stemming = false);
        let text = "x".repeat(1_000_000);
        assert_eq!(a.analyze(&text), ["x".repeat(MAX_TOKEN_CHARS)]);
    }

    #[test]
    fn cache_gives_the_same_terms() {
        let a = english();
        let mut cache = TermCache::default();
        let text = "Running runs RAN the dogs; dogs running 東京";
        for _ in 0..2 {
            let mut out = Tokens::default();
            a.tokens(text, &mut out, Some(&mut cache));
            let cached: Vec<&str> = out.iter().collect();
            assert_eq!(cached, a.analyze(text));
        }
    }
}
