//! Final scores: relevance first, with bounded boosts for importance and
//! recency.
//!
//! ```text
//! score    = relevance · boost
//! boost    = (w_rel + w_imp · importance + w_rec · recency) / (w_rel + w_imp + w_rec)
//! recency  = exp(−λ · age), or 1 for an evergreen record
//! age      = hours from the record's last access to the newest last access among the
//!            candidates; with an explicit decay, to now (the wall clock, as Nous decays)
//! λ        = decay, when given; else ln 2 / recency_half_life
//! ```
//!
//! Why this shape: the boost lies in `[w_rel / Σw, 1]`, so a score never
//! exceeds the relevance and never falls below `w_rel / Σw` of it. With the
//! default weights that band is [0.89, 1]: importance and age reorder hits of
//! similar relevance, but cannot lift an irrelevant memory over one that
//! answers the query (an additive `w_imp · importance` term can, and a
//! wall-clock decay `exp(−λ·h)` of the relevance drives every memory older
//! than a few months to 0). Age is measured from the newest candidate, not
//! from the wall clock, so a store left alone for a year ranks as it did the
//! day it was last written, and "newer" means newer than the other answers. A caller
//! who gives a decay rate asks for Nous's clock-based `exp(−λ·hours)`: then age counts
//! to now, so two equally old memories differ when one is evergreen.

use crate::error::{Error, Result};

// The boosts are small on purpose: on dated SciFact (ages uncorrelated with
// relevance) and on the dated conversation set, larger recency weights cost
// recall (conversations, alpha 0.5: 0.750 with recency weight 0 or 0.02, 0.745
// at 0.05 and 0.1); a tie-breaking boost is what they can afford.
pub const DEFAULT_RELEVANCE_WEIGHT: f64 = 1.0;
pub const DEFAULT_IMPORTANCE_WEIGHT: f64 = 0.1;
pub const DEFAULT_RECENCY_WEIGHT: f64 = 0.02;
/// Recency halves for every week a memory is older than the newest candidate.
pub const DEFAULT_RECENCY_HALF_LIFE_HOURS: f64 = 168.0;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    pub relevance: f64,
    pub importance: f64,
    pub recency: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            relevance: DEFAULT_RELEVANCE_WEIGHT,
            importance: DEFAULT_IMPORTANCE_WEIGHT,
            recency: DEFAULT_RECENCY_WEIGHT,
        }
    }
}

impl Weights {
    /// Weights from the caller's choices: `None` everywhere means the
    /// defaults; once any weight is given, the others weigh 0.
    pub fn resolve(
        relevance: Option<f64>,
        importance: Option<f64>,
        recency: Option<f64>,
    ) -> Result<Self> {
        if relevance.is_none() && importance.is_none() && recency.is_none() {
            return Ok(Weights::default());
        }
        let w = Weights {
            relevance: relevance.unwrap_or(0.0),
            importance: importance.unwrap_or(0.0),
            recency: recency.unwrap_or(0.0),
        };
        for (name, v) in [
            ("relevance", w.relevance),
            ("importance", w.importance),
            ("recency", w.recency),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::invalid(format!(
                    "weight {name:?} must be a finite number >= 0, got {v}"
                )));
            }
        }
        let top = w.relevance.max(w.importance).max(w.recency);
        if top <= 0.0 {
            return Err(Error::invalid("weights must not all be 0"));
        }
        // Only their ratios count: scaled to at most 1, so that no sum of them
        // overflows (three weights of 1e308 each summed to infinity: NaN scores).
        Ok(Weights {
            relevance: w.relevance / top,
            importance: w.importance / top,
            recency: w.recency / top,
        })
    }

    fn total(&self) -> f64 {
        self.relevance + self.importance + self.recency
    }

    /// The factor in `[w_rel / Σw, 1]` that multiplies the relevance.
    pub fn boost(&self, importance: f64, recency: f64) -> f64 {
        (self.relevance + self.importance * importance + self.recency * recency) / self.total()
    }
}

/// The age signal's rate λ per hour: `decay` when given, else from the half-life.
pub fn rate(decay: Option<f64>, half_life: f64) -> Result<f64> {
    match decay {
        Some(d) if !(d.is_finite() && d >= 0.0) => Err(Error::invalid(format!(
            "decay must be a finite rate >= 0 (per hour), got {d}"
        ))),
        Some(d) => Ok(d),
        None if !(half_life.is_finite() && half_life > 0.0) => Err(Error::invalid(format!(
            "recency_half_life must be a positive number of hours, got {half_life}"
        ))),
        None => Ok(std::f64::consts::LN_2 / half_life),
    }
}

/// Where ages count to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgeFrom {
    /// The newest last access among the candidates (the default).
    NewestCandidate,
    /// The request's `now` (an explicit decay rate).
    Clock,
}

impl AgeFrom {
    /// Clock-based ages for an explicit decay rate, relative ones otherwise.
    pub fn for_decay(decay: Option<f64>) -> Self {
        if decay.is_some() {
            AgeFrom::Clock
        } else {
            AgeFrom::NewestCandidate
        }
    }
}

/// Hours from `then` to `newest` (0 when `then` is the newer).
pub fn age_hours(newest: f64, then: f64) -> f64 {
    ((newest - then) / 3600.0).max(0.0)
}

pub fn recency(lambda: f64, hours: f64, evergreen: bool) -> f64 {
    if evergreen || lambda == 0.0 {
        1.0
    } else {
        (-lambda * hours).exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn recency_by_hand() {
        assert!(close(age_hours(7200.0, 0.0), 2.0));
        assert!(close(age_hours(0.0, 7200.0), 0.0));
        let lambda = rate(None, 168.0).unwrap();
        assert!(close(recency(lambda, 168.0, false), 0.5));
        assert!(close(recency(lambda, 336.0, false), 0.25));
        assert!(close(recency(lambda, 336.0, true), 1.0));
        assert!(close(
            recency(rate(Some(0.01), 1.0).unwrap(), 100.0, false),
            (-1.0f64).exp()
        ));
        assert!(close(recency(0.0, 1e9, false), 1.0));
        assert!(rate(Some(f64::NAN), 1.0).is_err());
        assert!(rate(Some(-1.0), 1.0).is_err());
        assert!(rate(None, 0.0).is_err());
    }

    #[test]
    fn boost_by_hand() {
        let w = Weights::resolve(None, None, None).unwrap();
        assert_eq!(w, Weights::default());
        let total = 1.0 + 0.1 + 0.02;
        assert!(close(w.boost(1.0, 1.0), 1.0));
        assert!(close(w.boost(0.0, 0.0), 1.0 / total));
        assert!(close(w.boost(0.5, 0.25), (1.0 + 0.05 + 0.005) / total));
        // Explicit weights: the unset ones weigh nothing.
        let w = Weights::resolve(Some(1.0), None, None).unwrap();
        assert!(close(w.boost(0.0, 0.0), 1.0));
        let w = Weights::resolve(None, Some(1.0), None).unwrap();
        assert!(close(w.boost(0.3, 0.9), 0.3));
        assert!(Weights::resolve(Some(-1.0), None, None).is_err());
        assert!(Weights::resolve(Some(0.0), Some(0.0), None).is_err());
        // Only the ratios count, however large the weights.
        let huge = Weights::resolve(Some(f64::MAX), Some(f64::MAX), Some(f64::MAX)).unwrap();
        assert!(close(huge.boost(1.0, 0.0), 2.0 / 3.0));
        let w = Weights::resolve(Some(4.0), Some(2.0), None).unwrap();
        assert!(close(w.boost(0.5, 0.0), 5.0 / 6.0));
    }

    #[test]
    fn relevance_stays_primary() {
        // Relevance 0.5, old and unimportant, against 0.39, new and important.
        let w = Weights::default();
        let floor = w.relevance / (w.relevance + w.importance + w.recency);
        assert!(0.5 * w.boost(0.0, 0.0) > 0.39 * w.boost(1.0, 1.0));
        assert!(close(w.boost(0.0, 0.0), floor));
    }
}
