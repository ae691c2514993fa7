//! A search's options, checked once: [`SearchOptions::new`] takes what the
//! caller gave (`Memory.search`'s arguments, their types checked by the
//! binding) and refuses a bad value with the message the caller sees; the
//! engine turns the options, the store's defaults and one query into a
//! [`SearchRequest`] ([`SearchOptions::request`]), which needs no check.

use super::conditions::{Admitted, Conditions};
use super::mode::Mode;
use super::search::SearchRequest;
use crate::error::{Error, Result};
use crate::fusion::Fusion;
use crate::hnsw::MAX_K;
use crate::repr::{py_float, py_str};
use crate::scoring::{self, AgeFrom, Weights};

/// Hits each retriever contributes before fusion when the caller does not say:
/// `max(CANDIDATES, 4 k)` (chosen on SciFact's train queries: `benches/tune_search.py`).
pub const CANDIDATES: usize = 50;

/// The same where the records a search admits hold conversation turns (records with
/// a session or a speaker): `max(TURN_CANDIDATES, 4 k)`. The speaker and session
/// passes rescore the candidates, so there the depth decides the ranking: at 100
/// every `k` up to 25 rescores the same ones, and a search for 5 or 10 gets the first
/// hits of a search for 20 (with 50, BM25 alone on LoCoMo's train half stored as turns
/// gave recall@10 0.617 at `k=10` and 0.625 from `k=20`'s first ten; at 100 both give
/// 0.630: `benches/README.md`). Elsewhere the two lists are fused as they are, and 50
/// ranks the first ten as 100 does.
pub const TURN_CANDIDATES: usize = 100;

/// The three weights' names, in the order of [`GivenWeights`].
pub const WEIGHT_NAMES: [&str; 3] = ["relevance", "importance", "recency"];

/// Weights as given (relevance, importance, recency; `None`: not given, so
/// 0 once any is): each checked; whether they add up to something is decided
/// with the store's defaults, at the search ([`Weights::resolve`]).
pub type GivenWeights = [Option<f64>; 3];

/// A search's arguments as the caller gave them, types checked, values not.
#[derive(Clone, Debug, PartialEq)]
pub struct Given<'a> {
    pub k: i64,
    pub mode: &'a str,
    pub candidates: Option<i64>,
    pub fusion: &'a str,
    pub rrf_k: f64,
    /// The cosine's weight in weighted fusion; None: chosen per query ([`Fusion::Adaptive`]).
    pub alpha: Option<f64>,
    pub context_weight: f64,
    pub answer_weight: f64,
    pub question_weight: f64,
    pub speaker_weight: f64,
    pub date_weight: f64,
    pub when_weight: f64,
    pub weights: Option<GivenWeights>,
    pub decay: Option<f64>,
    pub recency_half_life: Option<f64>,
    pub threshold: Option<f64>,
    pub min_similarity: Option<f64>,
    pub explain: bool,
    pub track_access: Option<bool>,
    /// λ of maximal marginal relevance ([`crate::mmr`]; 0: off).
    pub diversity: f64,
}

/// Checked options of one search. `None` means "the store's default" for
/// `weights`, `decay`, `recency_half_life` and `track_access` (see
/// [`SearchOptions::request`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SearchOptions {
    pub k: usize,
    pub mode: Mode,
    pub candidates: usize,
    /// The depth where the records admitted hold conversation turns ([`TURN_CANDIDATES`]).
    pub turn_candidates: usize,
    pub fusion: Fusion,
    /// The share of BM25 a conversation turn takes from its context
    /// ([`crate::fusion::contextual`]).
    pub context_weight: f64,
    /// The share of the gap to the cosine of the question before it that a
    /// turn answering it takes ([`crate::fusion::DEFAULT_ANSWER_WEIGHT`]).
    pub answer_weight: f64,
    /// The share of its relevance a memory that is all questions loses
    /// ([`crate::fusion::DEFAULT_QUESTION_WEIGHT`]).
    pub question_weight: f64,
    /// What a speaker the query names is worth to its turns
    /// ([`crate::fusion::speaker`]).
    pub speaker_weight: f64,
    /// What a date the query names is worth to the candidates created near it
    /// ([`crate::fusion::dated`]).
    pub date_weight: f64,
    /// What a memory that tells a time is worth to a question that asks when
    /// ([`crate::fusion::DEFAULT_WHEN_WEIGHT`]).
    pub when_weight: f64,
    pub weights: Option<GivenWeights>,
    pub decay: Option<f64>,
    pub recency_half_life: Option<f64>,
    pub threshold: Option<f64>,
    pub min_similarity: Option<f64>,
    pub explain: bool,
    pub track_access: Option<bool>,
    /// λ of maximal marginal relevance over the candidates ([`crate::mmr`]; 0: off).
    pub diversity: f64,
    /// Which records the search admits.
    pub admits: Conditions,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            k: 5,
            mode: Mode::Hybrid,
            candidates: CANDIDATES,
            turn_candidates: TURN_CANDIDATES,
            fusion: Fusion::default(),
            context_weight: crate::fusion::DEFAULT_CONTEXT_WEIGHT,
            answer_weight: crate::fusion::DEFAULT_ANSWER_WEIGHT,
            question_weight: crate::fusion::DEFAULT_QUESTION_WEIGHT,
            speaker_weight: crate::fusion::DEFAULT_SPEAKER_WEIGHT,
            date_weight: crate::fusion::DEFAULT_DATE_WEIGHT,
            when_weight: crate::fusion::DEFAULT_WHEN_WEIGHT,
            weights: None,
            decay: None,
            recency_half_life: None,
            threshold: None,
            min_similarity: None,
            explain: false,
            track_access: None,
            diversity: 0.0,
            admits: Conditions::default(),
        }
    }
}

impl SearchOptions {
    /// Checks every value, in the order the caller's messages have always
    /// come in: `k`, `mode`, `threshold`, `min_similarity`, `weights`,
    /// `decay`, `recency_half_life`, `candidates`, the fusion, then
    /// `context_weight`, `answer_weight`, `question_weight`, `speaker_weight`,
    /// `date_weight`, `when_weight`, then
    /// `diversity`.
    pub fn new(given: &Given<'_>) -> Result<Self> {
        let k = count("k", given.k, 1)?;
        let mode = Mode::parse(given.mode)?;
        let threshold = given
            .threshold
            .map(|t| number("threshold", t, None, None))
            .transpose()?;
        let min_similarity = given
            .min_similarity
            .map(|s| number("min_similarity", s, Some(-1.0), Some(1.0)))
            .transpose()?;
        if let Some(weights) = &given.weights {
            for (name, w) in WEIGHT_NAMES.iter().zip(weights) {
                if let Some(w) = *w {
                    number(&format!("weights[{}]", py_str(name)), w, Some(0.0), None)?;
                }
            }
        }
        let decay = given
            .decay
            .map(|d| number("decay", d, Some(0.0), None))
            .transpose()?;
        let recency_half_life = given
            .recency_half_life
            .map(|h| number("recency_half_life", h, Some(1e-9), None))
            .transpose()?;
        let (candidates, turn_candidates) = match given.candidates {
            Some(c) => {
                let c = count("candidates", c, 1)?;
                if c > MAX_K {
                    return Err(Error::invalid(format!(
                        "candidates must be at most {MAX_K}, got {c}"
                    )));
                }
                (c, c)
            }
            // At most what a search may return: a k the search allows never fails
            // on the depth chosen for it.
            None => {
                let deep = k.saturating_mul(4).min(MAX_K);
                (CANDIDATES.max(deep), TURN_CANDIDATES.max(deep))
            }
        };
        let fusion = match given.fusion {
            "rrf" => Fusion::rrf(given.rrf_k)?,
            "weighted" => given.alpha.map_or(Ok(Fusion::Adaptive), Fusion::weighted)?,
            other => {
                return Err(Error::invalid(format!(
                    "fusion must be one of {{'rrf', 'weighted'}}, got {other:?}"
                )))
            }
        };
        let context_weight = crate::fusion::context_weight(given.context_weight)?;
        let answer_weight = crate::fusion::answer_weight(given.answer_weight)?;
        let question_weight = crate::fusion::question_weight(given.question_weight)?;
        let speaker_weight = crate::fusion::speaker_weight(given.speaker_weight)?;
        let date_weight = crate::fusion::date_weight(given.date_weight)?;
        let when_weight = crate::fusion::when_weight(given.when_weight)?;
        let diversity = crate::mmr::diversity(given.diversity)?;
        Ok(SearchOptions {
            k,
            mode,
            candidates,
            turn_candidates,
            fusion,
            context_weight,
            answer_weight,
            question_weight,
            speaker_weight,
            date_weight,
            when_weight,
            weights: given.weights,
            decay,
            recency_half_life,
            threshold,
            min_similarity,
            explain: given.explain,
            track_access: given.track_access,
            diversity,
            admits: Conditions::default(),
        })
    }

    /// Whether the search records an access of its hits: as asked, else as
    /// the store's `defaults` say; neither saying, it does not.
    pub fn touch(&self, defaults: &SearchOptions) -> bool {
        self.track_access.or(defaults.track_access).unwrap_or(false)
    }

    /// Whether the speaker pass weighs this search's turns at least as the
    /// cosine does: a hybrid search with a speaker weight whose fusion gives
    /// BM25 (and the pass with it) at least half the relevance, as the
    /// adaptive fusion about does. Only then is a speaker's name kept from
    /// the query's vector ([`super::Engine::vector_text`]): where the cosine
    /// decides, the name must stay in it.
    pub fn weighs_speakers(&self) -> bool {
        let bm25_half = match self.fusion {
            Fusion::Adaptive => true,
            Fusion::Weighted { alpha } => alpha <= 0.5,
            Fusion::Rrf { .. } => false,
        };
        self.mode == Mode::Hybrid && bm25_half && self.speaker_weight > 0.0
    }

    /// The engine's request for one query: these options over the store's
    /// `defaults` (weights, decay, half-life, access tracking), `dates` the
    /// intervals the query's text names (checked here), among the records
    /// `admitted` (what [`Self::admits`] built: `Engine::build_conditions`). Without a
    /// query vector a hybrid search is a text search, and a vector search's
    /// `threshold` is a cosine similarity (elizaOS's `match_threshold`).
    pub fn request<'a>(
        &self,
        defaults: &SearchOptions,
        text: Option<&'a str>,
        vector: Option<&'a [f32]>,
        dates: &'a [(f64, f64)],
        admitted: &'a Admitted,
        now: f64,
    ) -> Result<SearchRequest<'a>> {
        crate::fusion::named_dates(dates)?;
        let mode = match (self.mode, vector) {
            (Mode::Hybrid, None) => Mode::Text,
            (mode, _) => mode,
        };
        let (threshold, min_similarity) = match (mode, self.threshold, self.min_similarity) {
            (Mode::Vector, Some(t), None) => (None, Some(t)),
            (_, t, s) => (t, s),
        };
        let [relevance, importance, recency] =
            self.weights.or(defaults.weights).unwrap_or_default();
        let weights = Weights::resolve(relevance, importance, recency)?;
        let decay = self.decay.or(defaults.decay);
        let half_life = self
            .recency_half_life
            .or(defaults.recency_half_life)
            .unwrap_or(scoring::DEFAULT_RECENCY_HALF_LIFE_HOURS);
        Ok(SearchRequest {
            text,
            vector,
            mode,
            filter: admitted.filter.as_ref(),
            k: self.k,
            candidates: self.candidates,
            turn_candidates: self.turn_candidates,
            fusion: self.fusion,
            context_weight: self.context_weight,
            answer_weight: self.answer_weight,
            question_weight: self.question_weight,
            speaker_weight: self.speaker_weight,
            date_weight: self.date_weight,
            dates,
            when_weight: self.when_weight,
            weights,
            rate: scoring::rate(decay, half_life)?,
            age_from: AgeFrom::for_decay(decay),
            now,
            threshold,
            min_similarity,
            explain: self.explain,
            touch: self.touch(defaults),
            current_only: admitted.current_only,
            diversity: self.diversity,
        })
    }
}

/// A count of at least `low`.
pub fn count(label: &str, value: i64, low: i64) -> Result<usize> {
    if value < low {
        return Err(Error::invalid(format!(
            "{label} must be an int >= {low}, got {value}"
        )));
    }
    usize::try_from(value).map_err(|_| {
        Error::invalid(format!(
            "{label} must be at most {}, got {value}",
            usize::MAX
        ))
    })
}

/// A finite number within `[low, high]` (either end open when `None`).
pub fn number(label: &str, x: f64, low: Option<f64>, high: Option<f64>) -> Result<f64> {
    if !x.is_finite() {
        return Err(Error::invalid(format!(
            "{label} must be a finite number, got {}",
            py_float(x)
        )));
    }
    if low.is_some_and(|l| x < l) || high.is_some_and(|h| x > h) {
        let end = |v: Option<f64>| v.map_or_else(|| "None".to_owned(), py_float);
        return Err(Error::invalid(format!(
            "{label} must be in [{}, {}], got {}",
            end(low),
            end(high),
            py_float(x)
        )));
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given() -> Given<'static> {
        Given {
            k: 5,
            mode: "hybrid",
            candidates: None,
            fusion: "weighted",
            rrf_k: 60.0,
            alpha: None,
            context_weight: 0.2,
            answer_weight: 0.4,
            question_weight: 0.08,
            speaker_weight: 0.5,
            date_weight: 0.2,
            when_weight: 0.05,
            weights: None,
            decay: None,
            recency_half_life: None,
            threshold: None,
            min_similarity: None,
            explain: false,
            track_access: None,
            diversity: 0.0,
        }
    }

    fn refused(g: Given<'_>) -> String {
        match SearchOptions::new(&g) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("accepted: {other:?}"),
        }
    }

    #[test]
    fn each_value_is_refused_with_its_message() {
        assert_eq!(
            refused(Given { k: 0, ..given() }),
            "k must be an int >= 1, got 0"
        );
        assert_eq!(
            refused(Given {
                mode: "fast",
                ..given()
            }),
            "mode must be one of {'hybrid', 'vector', 'text'}, got 'fast'"
        );
        assert_eq!(
            refused(Given {
                min_similarity: Some(1.5),
                ..given()
            }),
            "min_similarity must be in [-1.0, 1.0], got 1.5"
        );
        assert_eq!(
            refused(Given {
                threshold: Some(f64::NAN),
                ..given()
            }),
            "threshold must be a finite number, got nan"
        );
        assert_eq!(
            refused(Given {
                weights: Some([Some(-1.0), None, None]),
                ..given()
            }),
            "weights['relevance'] must be in [0.0, None], got -1.0"
        );
        assert_eq!(
            refused(Given {
                recency_half_life: Some(0.0),
                ..given()
            }),
            "recency_half_life must be in [1e-09, None], got 0.0"
        );
        assert_eq!(
            refused(Given {
                candidates: Some(0),
                ..given()
            }),
            "candidates must be an int >= 1, got 0"
        );
        assert_eq!(
            refused(Given {
                candidates: Some(1 << 30),
                ..given()
            }),
            format!("candidates must be at most {MAX_K}, got {}", 1 << 30)
        );
        assert_eq!(
            refused(Given {
                fusion: "rrf",
                rrf_k: -1.0,
                ..given()
            }),
            "rrf_k must be a finite number >= 0, got -1"
        );
        assert_eq!(
            refused(Given {
                context_weight: 1.5,
                ..given()
            }),
            "context_weight must be in [0, 1], got 1.5"
        );
        assert_eq!(
            refused(Given {
                context_weight: f64::NAN,
                ..given()
            }),
            "context_weight must be in [0, 1], got nan"
        );
        assert_eq!(
            refused(Given {
                speaker_weight: -0.5,
                ..given()
            }),
            "speaker_weight must be in [0, 1], got -0.5"
        );
        assert_eq!(
            refused(Given {
                speaker_weight: f64::INFINITY,
                ..given()
            }),
            "speaker_weight must be in [0, 1], got inf"
        );
        assert_eq!(
            refused(Given {
                date_weight: 2.0,
                ..given()
            }),
            "date_weight must be in [0, 1], got 2.0"
        );
        assert_eq!(
            refused(Given {
                when_weight: -0.1,
                ..given()
            }),
            "when_weight must be in [0, 1], got -0.1"
        );
        assert_eq!(
            refused(Given {
                diversity: 1.5,
                ..given()
            }),
            "diversity must be in [0, 1], got 1.5"
        );
        assert_eq!(
            refused(Given {
                diversity: f64::NAN,
                ..given()
            }),
            "diversity must be in [0, 1], got nan"
        );
        assert_eq!(
            refused(Given {
                alpha: Some(1.5),
                ..given()
            }),
            "alpha must be in [0, 1], got 1.5"
        );
    }

    #[test]
    fn alpha_given_fixes_the_weight_and_none_adapts_it() {
        let fusion = |alpha| {
            SearchOptions::new(&Given { alpha, ..given() })
                .unwrap()
                .fusion
        };
        assert_eq!(fusion(None), Fusion::Adaptive);
        assert_eq!(fusion(None), SearchOptions::default().fusion);
        assert_eq!(fusion(Some(0.3)), Fusion::Weighted { alpha: 0.3 });
    }

    #[test]
    fn speakers_are_weighed_where_bm25_has_half_the_relevance() {
        let weighs = |g: Given<'static>| SearchOptions::new(&g).unwrap().weighs_speakers();
        assert!(weighs(given()));
        assert!(weighs(Given {
            alpha: Some(0.5),
            ..given()
        }));
        assert!(!weighs(Given {
            alpha: Some(0.7),
            ..given()
        }));
        assert!(!weighs(Given {
            fusion: "rrf",
            ..given()
        }));
        assert!(!weighs(Given {
            mode: "vector",
            ..given()
        }));
        assert!(!weighs(Given {
            speaker_weight: 0.0,
            ..given()
        }));
    }

    #[test]
    fn the_request_takes_the_store_defaults_and_the_query() {
        let opts = SearchOptions::new(&Given {
            k: 30,
            threshold: Some(0.3),
            mode: "vector",
            ..given()
        })
        .unwrap();
        assert_eq!((opts.candidates, opts.turn_candidates), (120, 120));
        let small = SearchOptions::new(&Given { k: 10, ..given() }).unwrap();
        assert_eq!((small.candidates, small.turn_candidates), (50, 100));
        // A k the search allows is searched whole: its depth stops at what a
        // search may return.
        let deep = SearchOptions::new(&Given {
            k: MAX_K as i64 / 2,
            ..given()
        })
        .unwrap();
        assert_eq!((deep.candidates, deep.turn_candidates), (MAX_K, MAX_K));
        let fixed = SearchOptions::new(&Given {
            candidates: Some(30),
            ..given()
        })
        .unwrap();
        assert_eq!((fixed.candidates, fixed.turn_candidates), (30, 30));
        let defaults = SearchOptions {
            decay: Some(0.5),
            track_access: Some(false),
            weights: Some([Some(0.0), None, None]),
            ..SearchOptions::default()
        };
        let v = [1.0f32, 0.0];
        let all = Admitted {
            filter: None,
            current_only: true,
        };
        // The store's weights add up to nothing: refused at the search, as given.
        assert!(opts
            .request(&defaults, None, Some(&v), &[], &all, 0.0)
            .is_err());
        let defaults = SearchOptions {
            weights: None,
            ..defaults
        };
        let req = opts
            .request(&defaults, None, Some(&v), &[], &all, 0.0)
            .unwrap();
        assert_eq!((req.threshold, req.min_similarity), (None, Some(0.3)));
        assert_eq!(
            (req.rate, req.age_from, req.touch),
            (0.5, AgeFrom::Clock, false)
        );
        let text = SearchOptions::default()
            .request(&defaults, Some("q"), None, &[], &all, 0.0)
            .unwrap();
        assert_eq!(text.mode, Mode::Text);
        // The dates a query names are checked with the request.
        let err = SearchOptions::default()
            .request(&defaults, Some("q"), None, &[(2.0, 1.0)], &all, 0.0)
            .err()
            .unwrap();
        assert!(err.to_string().contains("start < end"), "{err}");
    }
}
