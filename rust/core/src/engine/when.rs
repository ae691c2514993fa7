//! The "when" pass: a question that asks when ("When did Maria adopt Shadow?")
//! is answered by the turn that says when ("I just adopted this pup last
//! week!"), which is often beside a turn that says more of the subject and
//! nothing of the time ("Her name is Shadow!"). Among the candidates of such a
//! question, a memory whose text tells a time (a relative one: "yesterday",
//! "last month", "three weeks ago"; a weekday; a day of a month: "on June 21")
//! gets `when_weight` more of the relevance ([`crate::fusion::dated`]'s form).
//!
//! On LoCoMo's train half, 78% of the evidence turns of its "when" questions
//! tell a time against 13% of all turns (`benches/README.md`). English only:
//! the question is read for its first words and a memory's terms are matched
//! through the index's analyser, so a store in another language never matches.

use crate::bm25::{Analyzer, Bm25Index};

/// Words that tell a time alone.
const ALONE: &[&str] = &[
    "yesterday",
    "today",
    "tonight",
    "tomorrow",
    "ago",
    "recently",
    "weekend",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];
/// Words that tell a time before a unit or a month ("last week", "next May").
const MODIFIERS: &[&str] = &["last", "next", "past", "coming", "previous"];
const UNITS: &[&str] = &[
    "week",
    "weeks",
    "month",
    "months",
    "year",
    "years",
    "days",
    "night",
    "summer",
    "winter",
    "spring",
    "fall",
    "autumn",
    "morning",
    "evening",
    "afternoon",
];
/// Months tell a time before a modifier or with a day or a year ("on June 21",
/// "May 2023"): "may" and "march" are verbs too.
const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Whether a query asks when: its first words are "when", "since when", "how
/// long", "what/which year, month, date, day or week", or "in/on which ...".
pub fn asks_when(query: &str) -> bool {
    let mut words = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(3)
        .map(str::to_lowercase);
    let (w0, w1, w2) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let unit = |w: &str| matches!(w, "year" | "month" | "date" | "day" | "week");
    match w0.as_str() {
        "when" => true,
        "since" => w1 == "when",
        "how" => w1 == "long",
        "what" | "which" => unit(&w1),
        "in" | "on" => matches!(w1.as_str(), "what" | "which") && unit(&w2),
        _ => false,
    }
}

const ALONE_KIND: u8 = 1;
const MODIFIER_KIND: u8 = 2;
const UNIT_KIND: u8 = 4;
const MONTH_KIND: u8 = 8;

/// The time words as an index's analyser makes them, each with its kind: analysed
/// once an engine, since its analyser is fixed.
pub(crate) struct TimeWords(Vec<(Box<str>, u8)>);

impl TimeWords {
    pub(crate) fn new(analyzer: &Analyzer) -> Self {
        let kinds = [
            (ALONE, ALONE_KIND),
            (MODIFIERS, MODIFIER_KIND),
            (UNITS, UNIT_KIND),
            (MONTHS, MONTH_KIND),
        ];
        TimeWords(
            kinds
                .iter()
                .flat_map(|&(words, kind)| words.iter().map(move |w| (w, kind)))
                .flat_map(|(w, kind)| analyzer.analyze(w).into_iter().map(move |t| (t, kind)))
                .map(|(t, kind)| (t.into_boxed_str(), kind))
                .collect(),
        )
    }
}

/// The term ids of the time words in one index's vocabulary, sorted, each with
/// its kinds: found for a query that asks when (a hash lookup a word).
pub(crate) struct TimeTerms(Vec<(u32, u8)>);

impl TimeTerms {
    pub(crate) fn of(index: &Bm25Index, words: &TimeWords) -> Self {
        let mut ids: Vec<(u32, u8)> = words
            .0
            .iter()
            .filter_map(|(t, kind)| index.vocab.get(t).map(|&id| (id, *kind)))
            .collect();
        ids.sort_unstable();
        // A term of two kinds (a stemmer may fold two words into one) keeps both.
        ids.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 |= b.1;
            }
            same
        });
        TimeTerms(ids)
    }

    /// Whether the index holds no time word, so no text tells a time.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the text of `id` tells a time (false for an id the index does
    /// not hold): one walk of its sorted terms beside the sorted time terms.
    pub(crate) fn told(&self, index: &Bm25Index, id: u64) -> bool {
        let Some(terms) = index.terms_of(id) else {
            return false;
        };
        let (mut i, mut j, mut kinds) = (0, 0, 0u8);
        while i < terms.len() && j < self.0.len() {
            match terms[i].cmp(&self.0[j].0) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    kinds |= self.0[j].1;
                    i += 1;
                    j += 1;
                }
            }
        }
        if kinds & ALONE_KIND != 0
            || (kinds & MODIFIER_KIND != 0 && kinds & (UNIT_KIND | MONTH_KIND) != 0)
        {
            return true;
        }
        kinds & MONTH_KIND != 0
            && terms
                .iter()
                .any(|&t| day_or_year(&index.term_text[t as usize]))
    }
}

/// A day of a month (1-31, "21st") or a year (1900-2199).
fn day_or_year(term: &str) -> bool {
    let digits = term.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let suffix = &term[digits.len()..];
    if !matches!(suffix, "" | "st" | "nd" | "rd" | "th") {
        return false;
    }
    let n: u32 = digits.parse().unwrap_or(0);
    (1..=31).contains(&n) || (1900..=2199).contains(&n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bm25::{AnalyzerConfig, Bm25Params};

    #[test]
    fn questions_that_ask_when() {
        for q in [
            "When did Melanie paint a sunrise?",
            "  when's the party",
            "Since when has he lived there?",
            "How long has Nate had his turtles?",
            "What year did John move?",
            "Which month was the wedding?",
            "In which year did she graduate?",
            "On what day is the meeting?",
        ] {
            assert!(asks_when(q), "{q}");
        }
        for q in [
            "What did Maria donate in December 2023?",
            "whenever you can",
            "What time is it?",
            "How many kids does she have?",
            "In which city does he live?",
            "",
            "?!",
            "Where was Jon when it rained?",
        ] {
            assert!(!asks_when(q), "{q}");
        }
    }

    #[test]
    fn days_and_years() {
        for t in ["1", "21", "21st", "2nd", "31", "1999", "2023"] {
            assert!(day_or_year(t), "{t}");
        }
        for t in [
            "0", "32", "100", "1899", "2200", "21x", "st", "", "12345", "٣",
        ] {
            assert!(!day_or_year(t), "{t}");
        }
    }

    #[test]
    fn texts_that_tell_a_time() {
        let texts = [
            "I adopted this pup from a shelter last week!",
            "Her name is Shadow and she is full of energy.",
            "Something not so great happened yesterday...",
            "My partner Rosa's birthday is on March 2, I never want to forget it.",
            "I may have 2 cats.",
            "We march on.",
            "We went three years ago.",
            "See you on Friday",
            "Next May we move.",
            "The last one was good.",
        ];
        let mut ix = Bm25Index::new(Bm25Params::default(), AnalyzerConfig::default());
        let ids: Vec<u64> = (0..texts.len() as u64).collect();
        ix.add(&ids, &texts).unwrap();
        let words = TimeWords::new(ix.analyzer());
        let tt = TimeTerms::of(&ix, &words);
        let told: Vec<bool> = ids.iter().map(|&id| tt.told(&ix, id)).collect();
        assert_eq!(
            told,
            [true, false, true, true, true, false, true, true, true, false]
        );
        assert!(!tt.told(&ix, 99));
        // An index that never saw a time word matches nothing.
        let mut plain = Bm25Index::new(Bm25Params::default(), AnalyzerConfig::default());
        plain.add(&[1], &["apples and pears"]).unwrap();
        let none = TimeTerms::of(&plain, &words);
        assert!(none.is_empty() && !none.told(&plain, 1));
    }
}
