//! The "when" pass: a question that asks when ("When did Maria adopt Shadow?")
//! is answered by the turn that says when ("I just adopted this pup last
//! week!"), which is often beside a turn that says more of the subject and
//! nothing of the time ("Her name is Shadow!"). Among the candidates of such a
//! question, a memory whose text tells a time gets `when_weight` more of the
//! relevance ([`crate::fusion::dated`]'s form).
//!
//! On LoCoMo's train half, 78% of the evidence turns of its "when" questions
//! tell a time against 13% of all turns (`benches/README.md`). The engine
//! matches analysed terms, not phrases: a memory tells a time when its terms
//! hold a word that does alone ("yesterday", "ago", a weekday), a modifier and
//! a unit anywhere in it ("last" and "week"), or a month and a day or a year
//! ("June" and "21"). Words the English stemmer folds into common ones
//! ("evening" into "even", "coming" into "come") and words of other senses
//! ("spring", "fall", "past") are left out. English stores only: in another
//! language the pass never applies, since English words analysed by that
//! language's stemmer meet its own words ("Last" and "Fall" in German).

use std::cell::OnceCell;

use crate::bm25::{Analyzer, Bm25Index, Language};

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
/// Words that tell a time with a unit ("last week", "next year").
const MODIFIERS: &[&str] = &["last", "next", "previous"];
const UNITS: &[&str] = &[
    "week", "weeks", "weekend", "month", "months", "year", "years", "night", "summer", "winter",
    "autumn",
];
/// Months tell a time with a day or a year ("on June 21", "May 2023"): "may"
/// and "march" are verbs too.
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

/// The time words as an index's analyser makes them, each with its kind, and
/// the days (1-31, "21st") and years (1900-2199) as it makes them: analysed
/// once an engine, since its analyser is fixed. Empty for a store that is not
/// in English.
pub(crate) struct TimeWords {
    words: Vec<(Box<str>, u8)>,
    numbers: Vec<Box<str>>,
}

impl TimeWords {
    pub(crate) fn new(analyzer: &Analyzer) -> Self {
        if analyzer.config().language != Language::English {
            return TimeWords {
                words: Vec::new(),
                numbers: Vec::new(),
            };
        }
        let kinds = [
            (ALONE, ALONE_KIND),
            (MODIFIERS, MODIFIER_KIND),
            (UNITS, UNIT_KIND),
            (MONTHS, MONTH_KIND),
        ];
        let words = kinds
            .iter()
            .flat_map(|&(words, kind)| words.iter().map(move |w| (w, kind)))
            .flat_map(|(w, kind)| analyzer.analyze(w).into_iter().map(move |t| (t, kind)))
            .map(|(t, kind)| (t.into_boxed_str(), kind))
            .collect();
        let days = (1..=31u32).flat_map(|d| {
            let suffix = match d {
                1 | 21 | 31 => "st",
                2 | 22 => "nd",
                3 | 23 => "rd",
                _ => "th",
            };
            [d.to_string(), format!("{d}{suffix}")]
        });
        let numbers = days
            .chain((1900..=2199u32).map(|y| y.to_string()))
            .flat_map(|n| analyzer.analyze(&n))
            .map(String::into_boxed_str)
            .collect();
        TimeWords { words, numbers }
    }
}

/// The term ids of the time words in one index's vocabulary, sorted, each with
/// its kinds: found for a query that asks when (a hash lookup a word; the
/// days' and years' only once a candidate holds a month).
pub(crate) struct TimeTerms<'a> {
    ids: Vec<(u32, u8)>,
    index: &'a Bm25Index,
    words: &'a TimeWords,
    numbers: OnceCell<Vec<(u32, u8)>>,
}

impl<'a> TimeTerms<'a> {
    pub(crate) fn of(index: &'a Bm25Index, words: &'a TimeWords) -> Self {
        let mut ids: Vec<(u32, u8)> = words
            .words
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
        TimeTerms {
            ids,
            index,
            words,
            numbers: OnceCell::new(),
        }
    }

    /// Whether the index holds no time word, so no text tells a time.
    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn numbers(&self) -> &[(u32, u8)] {
        self.numbers.get_or_init(|| {
            let mut ids: Vec<(u32, u8)> = (self.words.numbers.iter())
                .filter_map(|t| self.index.vocab.get(t).map(|&id| (id, MONTH_KIND)))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        })
    }

    /// Whether the text of `id` tells a time (false for an id the index does
    /// not hold). Each look-up runs over the shorter of the two sorted lists,
    /// so a memory of many terms costs the time words' count of searches.
    pub(crate) fn told(&self, id: u64) -> bool {
        let Some(terms) = self.index.terms_of(id) else {
            return false;
        };
        let mut kinds = 0u8;
        each_common(terms, &self.ids, |k| kinds |= k);
        if kinds & ALONE_KIND != 0 || (kinds & MODIFIER_KIND != 0 && kinds & UNIT_KIND != 0) {
            return true;
        }
        if kinds & MONTH_KIND == 0 {
            return false;
        }
        let mut dated = false;
        each_common(terms, self.numbers(), |_| dated = true);
        dated
    }
}

/// Calls `found` with the kind of each id of `terms` (sorted) that `ids`
/// (sorted by id) holds, searching the longer list for each entry of the
/// shorter.
fn each_common(terms: &[u32], ids: &[(u32, u8)], mut found: impl FnMut(u8)) {
    if terms.len() <= ids.len() {
        for t in terms {
            if let Ok(i) = ids.binary_search_by_key(t, |&(id, _)| id) {
                found(ids[i].1);
            }
        }
    } else {
        for &(id, kind) in ids {
            if terms.binary_search(&id).is_ok() {
                found(kind);
            }
        }
    }
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
            "I even liked the last note.",
            "Even if they come, note it.",
            "Water comes from the spring.",
            "We met on 21st June.",
        ];
        let mut ix = Bm25Index::new(Bm25Params::default(), AnalyzerConfig::default());
        let ids: Vec<u64> = (0..texts.len() as u64).collect();
        ix.add(&ids, &texts).unwrap();
        let words = TimeWords::new(ix.analyzer());
        let tt = TimeTerms::of(&ix, &words);
        let told: Vec<bool> = ids.iter().map(|&id| tt.told(id)).collect();
        assert_eq!(
            told,
            [
                true, false, true, true, true, false, true, true, false, false, false, false,
                false, true
            ]
        );
        assert!(!tt.told(99));
        // An index that never saw a time word matches nothing.
        let mut plain = Bm25Index::new(Bm25Params::default(), AnalyzerConfig::default());
        plain.add(&[1], &["apples and pears"]).unwrap();
        let none = TimeTerms::of(&plain, &words);
        assert!(none.is_empty() && !none.told(1));
    }

    #[test]
    fn a_store_in_another_language_never_tells_a_time() {
        let german = AnalyzerConfig {
            language: Language::German,
            ..AnalyzerConfig::default()
        };
        let mut ix = Bm25Index::new(Bm25Params::default(), german);
        ix.add(
            &[1, 2],
            &[
                "Die Last ist in diesem Fall zu groß.",
                "gestern, letzte Woche",
            ],
        )
        .unwrap();
        let words = TimeWords::new(ix.analyzer());
        let tt = TimeTerms::of(&ix, &words);
        assert!(tt.is_empty() && !tt.told(1) && !tt.told(2));
    }

    #[test]
    fn a_memory_of_many_terms_is_one_search_a_time_word() {
        // 20,000 distinct terms, a month among them and no day: the look-ups run
        // over the time words, not over the memory's terms.
        let text: String = (0..20_000).map(|i| format!("w{i} ")).collect::<String>() + "june";
        let mut ix = Bm25Index::new(Bm25Params::default(), AnalyzerConfig::default());
        ix.add(&[1, 2], &[text.as_str(), "on june 21"]).unwrap();
        let words = TimeWords::new(ix.analyzer());
        let tt = TimeTerms::of(&ix, &words);
        assert!(!tt.told(1) && tt.told(2));
    }
}
