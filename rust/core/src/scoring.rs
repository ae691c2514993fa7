//! Final scores: temporal decay, recency and the composite of relevance,
//! importance and recency. Times are unix seconds; rates are per hour.
//!
//! - hours since last access: `h = max(0, now − last_accessed_at) / 3600`
//! - decay factor: `d = exp(−λ · h)`, or 1 for an evergreen record or λ = 0
//! - recency: `r = 0.5 ^ (h / half_life)`, or 1 for an evergreen record
//! - final score: `w_rel · relevance · d + w_imp · importance + w_rec · r`
//!
//! Unless the caller sets the recency weight, it is 0 when decay is on
//! (λ > 0): decay already penalises old memories, and counting age twice
//! would bury them.

use crate::error::{Error, Result};

pub const DEFAULT_RELEVANCE_WEIGHT: f64 = 0.5;
pub const DEFAULT_IMPORTANCE_WEIGHT: f64 = 0.3;
pub const DEFAULT_RECENCY_WEIGHT: f64 = 0.2;
/// Recency halves every week without access.
pub const DEFAULT_RECENCY_HALF_LIFE_HOURS: f64 = 168.0;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    pub relevance: f64,
    pub importance: f64,
    pub recency: f64,
}

impl Weights {
    /// Weights from the caller's choices: `None` everywhere means the
    /// defaults; a recency weight left unset is 0 when decay is on.
    pub fn resolve(
        relevance: Option<f64>,
        importance: Option<f64>,
        recency: Option<f64>,
        decay: f64,
    ) -> Result<Self> {
        let given = relevance.is_some() || importance.is_some() || recency.is_some();
        let default = |v: f64| if given { 0.0 } else { v };
        let recency_default = if decay > 0.0 {
            0.0
        } else {
            default(DEFAULT_RECENCY_WEIGHT)
        };
        let w = Weights {
            relevance: relevance.unwrap_or(default(DEFAULT_RELEVANCE_WEIGHT)),
            importance: importance.unwrap_or(default(DEFAULT_IMPORTANCE_WEIGHT)),
            recency: recency.unwrap_or(recency_default),
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
        Ok(w)
    }
}

pub fn check_decay(decay: f64) -> Result<()> {
    if !(decay.is_finite() && decay >= 0.0) {
        return Err(Error::invalid(format!(
            "decay must be a finite rate >= 0 (per hour), got {decay}"
        )));
    }
    Ok(())
}

pub fn check_half_life(hours: f64) -> Result<()> {
    if !(hours.is_finite() && hours > 0.0) {
        return Err(Error::invalid(format!(
            "recency_half_life must be a positive number of hours, got {hours}"
        )));
    }
    Ok(())
}

pub fn hours_since(now: f64, then: f64) -> f64 {
    ((now - then) / 3600.0).max(0.0)
}

pub fn decay_factor(lambda: f64, hours: f64, evergreen: bool) -> f64 {
    if evergreen || lambda == 0.0 {
        1.0
    } else {
        (-lambda * hours).exp()
    }
}

pub fn recency(hours: f64, half_life: f64, evergreen: bool) -> f64 {
    if evergreen {
        1.0
    } else {
        0.5f64.powf(hours / half_life)
    }
}

pub fn composite(w: &Weights, relevance: f64, decay: f64, importance: f64, recency: f64) -> f64 {
    w.relevance * relevance * decay + w.importance * importance + w.recency * recency
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn decay_and_recency_by_hand() {
        assert!(close(hours_since(7200.0, 0.0), 2.0));
        assert!(close(hours_since(0.0, 7200.0), 0.0));
        assert!(close(decay_factor(0.01, 100.0, false), (-1.0f64).exp()));
        assert!(close(decay_factor(0.01, 100.0, true), 1.0));
        assert!(close(decay_factor(0.0, 100.0, false), 1.0));
        assert!(close(recency(168.0, 168.0, false), 0.5));
        assert!(close(recency(336.0, 168.0, false), 0.25));
        assert!(close(recency(336.0, 168.0, true), 1.0));
    }

    #[test]
    fn composite_by_hand() {
        let w = Weights::resolve(None, None, None, 0.0).unwrap();
        assert_eq!((w.relevance, w.importance, w.recency), (0.5, 0.3, 0.2));
        assert!(close(composite(&w, 0.8, 1.0, 0.5, 0.25), 0.4 + 0.15 + 0.05));
        // Decay on and recency unset: no double penalty.
        let w = Weights::resolve(None, None, None, 0.001).unwrap();
        assert_eq!((w.relevance, w.importance, w.recency), (0.5, 0.3, 0.0));
        assert!(close(composite(&w, 0.8, 0.5, 0.5, 0.25), 0.2 + 0.15));
        // Explicit weights: the unset ones weigh nothing, a set recency stays.
        let w = Weights::resolve(Some(1.0), None, None, 0.0).unwrap();
        assert_eq!((w.relevance, w.importance, w.recency), (1.0, 0.0, 0.0));
        let w = Weights::resolve(None, None, Some(0.1), 0.01).unwrap();
        assert_eq!(w.recency, 0.1);
        assert!(Weights::resolve(Some(-1.0), None, None, 0.0).is_err());
        assert!(check_decay(f64::NAN).is_err());
        assert!(check_half_life(0.0).is_err());
    }
}
