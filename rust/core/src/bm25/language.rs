//! The languages the analyzer knows: each has a Snowball stemmer (from
//! `rust-stemmers`) and a built-in stopword list.

use rust_stemmers::Algorithm;

use crate::error::{Error, Result};

use super::stopwords;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    Arabic,
    Danish,
    Dutch,
    English,
    Finnish,
    French,
    German,
    Greek,
    Hungarian,
    Italian,
    Norwegian,
    Portuguese,
    Romanian,
    Russian,
    Spanish,
    Swedish,
    Tamil,
    Turkish,
}

impl Language {
    pub const ALL: [Language; 18] = [
        Language::Arabic,
        Language::Danish,
        Language::Dutch,
        Language::English,
        Language::Finnish,
        Language::French,
        Language::German,
        Language::Greek,
        Language::Hungarian,
        Language::Italian,
        Language::Norwegian,
        Language::Portuguese,
        Language::Romanian,
        Language::Russian,
        Language::Spanish,
        Language::Swedish,
        Language::Tamil,
        Language::Turkish,
    ];

    /// The lowercase English name, as accepted by [`Language::parse`].
    pub fn name(self) -> &'static str {
        match self {
            Language::Arabic => "arabic",
            Language::Danish => "danish",
            Language::Dutch => "dutch",
            Language::English => "english",
            Language::Finnish => "finnish",
            Language::French => "french",
            Language::German => "german",
            Language::Greek => "greek",
            Language::Hungarian => "hungarian",
            Language::Italian => "italian",
            Language::Norwegian => "norwegian",
            Language::Portuguese => "portuguese",
            Language::Romanian => "romanian",
            Language::Russian => "russian",
            Language::Spanish => "spanish",
            Language::Swedish => "swedish",
            Language::Tamil => "tamil",
            Language::Turkish => "turkish",
        }
    }

    /// Parses a language name (case-insensitive), with a message listing the
    /// accepted names when it is unknown.
    pub fn parse(name: &str) -> Result<Language> {
        let lower = name.trim().to_lowercase();
        Language::ALL
            .into_iter()
            .find(|l| l.name() == lower)
            .ok_or_else(|| {
                let names: Vec<&str> = Language::ALL.iter().map(|l| l.name()).collect();
                Error::invalid(format!(
                    "language must be one of {{{}}}, got {name:?}",
                    names.join(", ")
                ))
            })
    }

    pub(crate) fn algorithm(self) -> Algorithm {
        match self {
            Language::Arabic => Algorithm::Arabic,
            Language::Danish => Algorithm::Danish,
            Language::Dutch => Algorithm::Dutch,
            Language::English => Algorithm::English,
            Language::Finnish => Algorithm::Finnish,
            Language::French => Algorithm::French,
            Language::German => Algorithm::German,
            Language::Greek => Algorithm::Greek,
            Language::Hungarian => Algorithm::Hungarian,
            Language::Italian => Algorithm::Italian,
            Language::Norwegian => Algorithm::Norwegian,
            Language::Portuguese => Algorithm::Portuguese,
            Language::Romanian => Algorithm::Romanian,
            Language::Russian => Algorithm::Russian,
            Language::Spanish => Algorithm::Spanish,
            Language::Swedish => Algorithm::Swedish,
            Language::Tamil => Algorithm::Tamil,
            Language::Turkish => Algorithm::Turkish,
        }
    }

    /// The built-in stopword list, lowercase, matched before stemming.
    pub fn stopwords(self) -> &'static [&'static str] {
        match self {
            Language::Arabic => stopwords::ARABIC,
            Language::Danish => stopwords::DANISH,
            Language::Dutch => stopwords::DUTCH,
            Language::English => stopwords::ENGLISH,
            Language::Finnish => stopwords::FINNISH,
            Language::French => stopwords::FRENCH,
            Language::German => stopwords::GERMAN,
            Language::Greek => stopwords::GREEK,
            Language::Hungarian => stopwords::HUNGARIAN,
            Language::Italian => stopwords::ITALIAN,
            Language::Norwegian => stopwords::NORWEGIAN,
            Language::Portuguese => stopwords::PORTUGUESE,
            Language::Romanian => stopwords::ROMANIAN,
            Language::Russian => stopwords::RUSSIAN,
            Language::Spanish => stopwords::SPANISH,
            Language::Swedish => stopwords::SWEDISH,
            Language::Tamil => stopwords::TAMIL,
            Language::Turkish => stopwords::TURKISH,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for l in Language::ALL {
            assert_eq!(Language::parse(l.name()).unwrap(), l);
            assert!(!l.stopwords().is_empty(), "{} has no stopwords", l.name());
        }
        assert_eq!(Language::parse(" English ").unwrap(), Language::English);
        let err = Language::parse("klingon").unwrap_err().to_string();
        assert!(
            err.contains("must be one of") && err.contains("english"),
            "{err}"
        );
    }

    #[test]
    fn stopword_lists_are_lowercase_and_unique() {
        for l in Language::ALL {
            let words = l.stopwords();
            let mut seen = std::collections::HashSet::new();
            for w in words {
                assert_eq!(*w, w.to_lowercase(), "{}: {w}", l.name());
                assert!(seen.insert(*w), "{}: duplicate {w}", l.name());
            }
        }
    }
}
