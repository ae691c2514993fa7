//! The speaker of a conversation turn as a field the query can match.
//!
//! A turn carries who said it (`"user"` for the store's own person, a name
//! otherwise). A question in the first person ("what did I say about ...")
//! names the speaker `"user"`; a question that holds a speaker's name ("what
//! did Caroline say ...") names that speaker. Names are compared as the BM25
//! analyzer sees them (lowercased, stemmed), so "Caroline's" names
//! "Caroline"; a name of several words is named when the query holds each of
//! them. The first-person words are English, as the analyzer's default is.

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
    fn each_speaker_is_decided_once() {
        let analyzer = Analyzer::default();
        let mut q = SpeakerQuery::new(&analyzer, "what did Caroline say");
        assert!(q.names(7, "Caroline"));
        // Decided by its id from then on.
        assert!(q.names(7, "someone else"));
        assert!(!q.names(8, "Melanie"));
    }
}
