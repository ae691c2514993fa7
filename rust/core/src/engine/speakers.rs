//! The speaker of a conversation turn as a field the query can match.
//!
//! A turn carries who said it (`"user"` for the store's own person, a name
//! otherwise). A question in the first person ("what did I say about ...")
//! names the speaker `"user"`; a question that holds a speaker's name ("what
//! did Caroline say ...") names that speaker. Names are compared as the BM25
//! analyzer sees them (lowercased, stemmed), so "Caroline's" names
//! "Caroline"; a name of several words is named when the query holds each of
//! them. The first-person words are English, as the analyzer's default is.
//!
//! The same names are kept from the query's vector ([`NameWords::without_names`]): a
//! turn's vector is of its text alone, so a name in the question pulls its
//! vector toward every turn that mentions the name rather than toward what
//! was said; the speaker pass already gives the name its due.

use rustc_hash::{FxHashMap, FxHashSet};
use unicode_segmentation::UnicodeSegmentation;

use crate::bm25::Analyzer;

/// The speaker of the store's own person's turns.
pub const USER: &str = "user";

/// Words by which a question speaks of the store's own person.
const FIRST_PERSON: [&str; 5] = ["i", "me", "my", "mine", "myself"];

/// Whether `text` speaks in the first person ("I", "my", "I'm", ...).
fn first_person(text: &str) -> bool {
    text.unicode_words().any(|word| {
        // "I'm", "I've", "I’d": the pronoun before the apostrophe.
        let word = word.split(['\'', '\u{2019}']).next().unwrap_or(word);
        FIRST_PERSON.iter().any(|p| word.eq_ignore_ascii_case(p))
    })
}

/// One query's view of the speakers: which of them it names, decided once
/// per speaker (a search meets a few among its candidates).
pub(super) struct SpeakerQuery<'a> {
    analyzer: &'a Analyzer,
    first_person: bool,
    /// The query's terms, as the analyzer gives them.
    terms: FxHashSet<String>,
    /// Speakers decided so far: interned name to whether the query names it.
    decided: FxHashMap<u32, bool>,
}

impl<'a> SpeakerQuery<'a> {
    pub(super) fn new(analyzer: &'a Analyzer, text: &str) -> Self {
        SpeakerQuery {
            analyzer,
            first_person: first_person(text),
            terms: analyzer.analyze(text).into_iter().collect(),
            decided: FxHashMap::default(),
        }
    }

    /// Whether the query names the speaker `name` (interned as `id`).
    pub(super) fn names(&mut self, id: u32, name: &str) -> bool {
        if let Some(&named) = self.decided.get(&id) {
            return named;
        }
        let parts = self.analyzer.analyze(name);
        let named = (self.first_person && parts.len() == 1 && parts[0] == USER)
            || (!parts.is_empty() && parts.iter().all(|p| self.terms.contains(p)));
        self.decided.insert(id, named);
        named
    }
}

/// The table of conversation messages (elizaOS's name, and the agent's
/// history's).
pub const MESSAGES: &str = "messages";

/// Longest name, in bytes, read from a transcript line or left out of a
/// question's vector (and so longest word of one).
const MAX_NAME: usize = 64;

/// The speaker of a message written as a transcript line, "Caroline: I
/// painted a sunrise": a name of one to three words, each with a capital
/// first and otherwise letters (or `'`, `-`, `.`), before a colon, a space
/// and something said. None for any other text ("see: below", "Note that:
/// ...", "12:30 works").
pub fn transcript_speaker(text: &str) -> Option<&str> {
    let (name, said) = text.split_once(':')?;
    if name.len() > MAX_NAME
        || !said.starts_with(char::is_whitespace)
        || !said.chars().any(char::is_alphanumeric)
    {
        return None;
    }
    let words: Vec<&str> = name.split(' ').collect();
    let named = words.len() <= 3
        && words.iter().all(|w| {
            let mut chars = w.chars();
            chars.next().is_some_and(char::is_uppercase)
                && chars.all(|c| c.is_alphabetic() || matches!(c, '\'' | '-' | '.'))
        });
    named.then_some(name)
}

/// Most words of a name left out of a question's vector: a person's name
/// ("Caroline", "Mary Ann", "Dr. O'Brien") has a few; a longer one is kept.
const MAX_NAME_WORDS: usize = 3;

/// Most distinct words of a question tried as a name's words: beyond them, a
/// question of thousands of capitalised words would try millions of
/// combinations.
const MAX_QUESTION_NAMES: usize = 64;

/// The names of the speakers with turns, as written names are (a
/// capital first), by their words: a name's words, lowercased, sorted and
/// joined by a space, to the speakers so named, so that a question finds
/// the names it holds from its own words' combinations, at any count of
/// speakers. Role names ("user", "assistant") are lowercase and left out:
/// "the system's settings" is not about a speaker called "system".
#[derive(Default)]
pub(crate) struct NameWords {
    by_key: FxHashMap<Box<str>, Vec<u32>>,
    /// Each word of those names, with the count of names that hold it.
    words: FxHashMap<Box<str>, u32>,
    /// Turns per speaker, current or superseded (which turns a search admits
    /// is asked of each name found: [`NameWords::without_names`]'s `named`).
    turns: FxHashMap<u32, u32>,
}

impl NameWords {
    /// Counts a turn of speaker `id`, named `name`.
    pub(crate) fn add(&mut self, id: u32, name: &str) {
        let n = self.turns.entry(id).or_default();
        *n += 1;
        if *n > 1 {
            return;
        }
        let Some((key, words)) = name_key(name) else {
            return;
        };
        self.by_key.entry(key).or_default().push(id);
        for word in words {
            *self.words.entry(word.into_boxed_str()).or_default() += 1;
        }
    }

    /// Uncounts a turn of speaker `id`, named `name`.
    pub(crate) fn remove(&mut self, id: u32, name: &str) {
        let Some(n) = self.turns.get_mut(&id) else {
            return;
        };
        *n -= 1;
        if *n > 0 {
            return;
        }
        self.turns.remove(&id);
        let Some((key, words)) = name_key(name) else {
            return;
        };
        if let Some(ids) = self.by_key.get_mut(&*key) {
            ids.retain(|&other| other != id);
            if ids.is_empty() {
                self.by_key.remove(&*key);
            }
        }
        for word in words {
            if let Some(c) = self.words.get_mut(word.as_str()) {
                *c -= 1;
                if *c == 0 {
                    self.words.remove(word.as_str());
                }
            }
        }
    }

    /// `text` for the embedder without the names of the speakers it holds
    /// (each of a name's words written with a capital, as in "What did
    /// Caroline paint?") that `named` says the speaker pass matches, or None
    /// when it holds none or nothing would be left.
    pub(crate) fn without_names(
        &self,
        text: &str,
        mut named: impl FnMut(u32) -> bool,
    ) -> Option<String> {
        if self.by_key.is_empty() {
            return None;
        }
        let segments: Vec<(&str, Option<String>)> = text
            .split_word_bounds()
            .map(|s| (s, as_name_word(s)))
            .collect();
        let mut words: Vec<&str> = Vec::new();
        for w in segments.iter().filter_map(|(_, w)| w.as_deref()) {
            if w.len() <= MAX_NAME && self.words.contains_key(w) && !words.contains(&w) {
                words.push(w);
                if words.len() == MAX_QUESTION_NAMES {
                    break;
                }
            }
        }
        let mut out: FxHashSet<String> = FxHashSet::default();
        let mut try_name = |combo: &mut Vec<&str>| {
            combo.sort_unstable();
            // Spellings of one name ("Dr. Smith", "DR SMITH") share a key: it
            // is a name here if any of them is, each asked of `named` (whose
            // answer may differ by speaker: the search admits some turns).
            let ids = self.by_key.get(combo.join(" ").as_str());
            if ids.is_some_and(|ids| ids.iter().any(|&id| named(id))) {
                out.extend(combo.iter().map(|w| (*w).to_owned()));
            }
        };
        for (i, a) in words.iter().enumerate() {
            try_name(&mut vec![a]);
            for (j, b) in words.iter().enumerate().skip(i + 1) {
                try_name(&mut vec![a, b]);
                for c in &words[j + 1..] {
                    try_name(&mut vec![a, b, c]);
                }
            }
        }
        if out.is_empty() {
            return None;
        }
        let kept: String = segments
            .iter()
            .filter(|(_, w)| !w.as_deref().is_some_and(|w| out.contains(w)))
            .map(|(s, _)| *s)
            .collect();
        let kept = kept.split_whitespace().collect::<Vec<_>>().join(" ");
        kept.chars().any(char::is_alphanumeric).then_some(kept)
    }
}

/// A name's words, lowercased, if it is written as a name.
fn name_words(name: &str) -> Option<Vec<String>> {
    if !name.chars().next().is_some_and(char::is_uppercase) {
        return None;
    }
    let words: Vec<String> = name.unicode_words().map(str::to_lowercase).collect();
    (!words.is_empty()).then_some(words)
}

/// A name's key in [`NameWords`] and its distinct words, if it is written
/// as a name of at most [`MAX_NAME_WORDS`] words and [`MAX_NAME`] bytes.
fn name_key(name: &str) -> Option<(Box<str>, Vec<String>)> {
    if name.len() > MAX_NAME {
        return None;
    }
    let mut words = name_words(name)?;
    words.sort_unstable();
    words.dedup();
    (words.len() <= MAX_NAME_WORDS).then(|| (words.join(" ").into_boxed_str(), words))
}

/// A word of the query as a name's word: lowercased, without a possessive
/// ("Caroline's", "Caroline’s", "James'"); None unless written with a capital.
fn as_name_word(word: &str) -> Option<String> {
    if !word.chars().next().is_some_and(char::is_uppercase) {
        return None;
    }
    let bare = ["'s", "\u{2019}s", "'", "\u{2019}"]
        .iter()
        .find_map(|p| word.strip_suffix(p))
        .filter(|b| !b.is_empty())
        .unwrap_or(word);
    Some(bare.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(query: &str, speaker: &str) -> bool {
        let analyzer = Analyzer::default();
        SpeakerQuery::new(&analyzer, query).names(0, speaker)
    }

    #[test]
    fn the_first_person_names_the_user() {
        for q in [
            "what did I say about hiking?",
            "my favourite food",
            "Remind me",
            "I'm looking for the hotel",
            "I’ve forgotten",
            "is it mine",
            "MYSELF",
        ] {
            assert!(names(q, "user"), "{q}");
            assert!(names(q, "User"), "{q}");
            assert!(!names(q, "Caroline"), "{q}");
        }
        // Words that only hold the pronoun's letters.
        for q in ["item mind", "imagine myth", "what did she say"] {
            assert!(!names(q, "user"), "{q}");
        }
    }

    #[test]
    fn a_name_in_the_query_names_its_speaker() {
        assert!(names("What did Caroline say about painting?", "Caroline"));
        assert!(names("caroline's new job", "Caroline"));
        assert!(!names("What did Melanie say?", "Caroline"));
        // A name of several words: each must be there.
        assert!(names("what did Mary Ann plan", "Mary Ann"));
        assert!(!names("what did Mary plan", "Mary Ann"));
        // The user by name too, and no speaker named by stopwords alone.
        assert!(names("what does the user like", "user"));
        assert!(!names("what did the assistant say", "the"));
    }

    #[test]
    fn a_transcript_line_names_its_speaker() {
        for (text, name) in [
            ("Caroline: I painted a sunrise", "Caroline"),
            ("Mary Ann: hi there", "Mary Ann"),
            ("Dr. O'Brien-Smith: yes", "Dr. O'Brien-Smith"),
            ("Zoë:\tnice", "Zoë"),
            ("User: what's the weather?", "User"),
        ] {
            assert_eq!(transcript_speaker(text), Some(name), "{text}");
        }
        for text in [
            "Caroline:I painted",
            "Caroline: ...",
            "Caroline:",
            "caroline: hi",
            "Note that: x",
            "The Lake Gallery Cafe: opens at ten",
            "12:30 works",
            "Caroline said: hi",
            ": hi",
            "Room 12: free",
            "no colon at all",
        ] {
            assert_eq!(transcript_speaker(text), None, "{text}");
        }
        let long = format!("{}: hi", "A".repeat(MAX_NAME + 1));
        assert_eq!(transcript_speaker(&long), None);
    }

    #[test]
    fn a_query_word_as_a_name_word() {
        assert_eq!(as_name_word("Caroline's").as_deref(), Some("caroline"));
        assert_eq!(
            as_name_word("Caroline\u{2019}s").as_deref(),
            Some("caroline")
        );
        assert_eq!(as_name_word("James'").as_deref(), Some("james"));
        assert_eq!(as_name_word("caroline"), None);
        assert_eq!(as_name_word("'s"), None);
        assert_eq!(
            name_words("Mary Ann"),
            Some(vec!["mary".into(), "ann".into()])
        );
        assert_eq!(name_words("assistant"), None);
    }

    #[test]
    fn each_speaker_is_decided_once() {
        let analyzer = Analyzer::default();
        let mut q = SpeakerQuery::new(&analyzer, "what did Caroline say");
        assert!(q.names(7, "Caroline"));
        // Decided by its id from then on.
        assert!(q.names(7, "someone else"));
        assert!(!q.names(8, "Melanie"));
    }
}
