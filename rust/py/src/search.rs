//! `memlane._core.SearchRequest`: `Memory.search`'s options and the records
//! it admits (`memlane_core::engine::Conditions`), checked once
//! (`memlane_core::engine::SearchOptions::new`) and carried as one frozen
//! object to `Engine.search`. This file checks only Python types, with the
//! messages of `memlane.coerce`; the core checks the values.

use memlane_core::engine::{Given, Mode, SearchOptions};
use memlane_core::fusion;
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyMapping, PyString, PyTuple};

use crate::conditions::{self, Args};
use crate::convert::type_name;
use crate::errors::{invalid, to_py};

/// The checked options of one search (or, for a store, its defaults: see
/// `Engine.search`'s `defaults`).
#[pyclass(module = "memlane._core", name = "SearchRequest", frozen)]
pub struct PySearchRequest {
    pub options: SearchOptions,
}

/// numpy's scalar types `coerce` takes: (`integer`, `floating`) as numbers,
/// `bool_` as a bool. Looked up once, and only for a value of another type.
fn numpy_types(py: Python<'_>) -> PyResult<&Bound<'_, PyTuple>> {
    static TYPES: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();
    TYPES
        .get_or_try_init(py, || {
            let np = py.import("numpy")?;
            let types = [
                np.getattr("integer")?,
                np.getattr("floating")?,
                np.getattr("bool_")?,
            ];
            Ok::<_, PyErr>(PyTuple::new(py, types)?.unbind())
        })
        .map(|t| t.bind(py))
}

fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr()
        .map_or_else(|_| "?".to_owned(), |r| r.to_string())
}

/// A number as a float (`coerce.number`'s types: no bool; int, float and
/// numpy's numbers), its value unchecked.
fn number(py: Python<'_>, obj: &Bound<'_, PyAny>, label: &str) -> PyResult<f64> {
    if let Ok(x) = obj.cast::<PyFloat>() {
        return Ok(x.value());
    }
    let numeric = !obj.is_instance_of::<PyBool>()
        && (obj.is_instance_of::<PyInt>() || obj.is_instance(&numpy_types(py)?.get_slice(0, 2))?);
    if !numeric {
        return Err(invalid(
            py,
            format!("{label} must be a number, got {}", type_name(obj)),
        ));
    }
    obj.extract::<f64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(py) {
            invalid(py, format!("{label} is too large for a float"))
        } else {
            e
        }
    })
}

pub(crate) fn optional_number(
    py: Python<'_>,
    obj: Option<&Bound<'_, PyAny>>,
    label: &str,
) -> PyResult<Option<f64>> {
    obj.filter(|o| !o.is_none())
        .map(|o| number(py, o, label))
        .transpose()
}

/// An int (not a bool) that fits 64 bits; `low` names the least one allowed
/// in the message (the core checks it).
fn count(py: Python<'_>, obj: &Bound<'_, PyAny>, label: &str, low: i64) -> PyResult<i64> {
    let below = || {
        invalid(
            py,
            format!("{label} must be an int >= {low}, got {}", repr(obj)),
        )
    };
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(below());
    }
    match obj.extract::<i64>() {
        Ok(v) => Ok(v),
        Err(_) if obj.lt(low)? => Err(below()),
        Err(_) => Err(invalid(
            py,
            format!("{label} must be at most {}, got {}", i64::MAX, repr(obj)),
        )),
    }
}

/// `coerce.flag`: a bool or a numpy bool.
pub(crate) fn flag(py: Python<'_>, obj: &Bound<'_, PyAny>, label: &str) -> PyResult<bool> {
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(b.is_true());
    }
    if obj.is_instance(&numpy_types(py)?.get_item(2)?)? {
        return obj.is_truthy();
    }
    Err(invalid(
        py,
        format!("{label} must be a bool, got {}", type_name(obj)),
    ))
}

pub(crate) fn optional_flag(
    py: Python<'_>,
    obj: Option<&Bound<'_, PyAny>>,
    label: &str,
) -> PyResult<Option<bool>> {
    obj.filter(|o| !o.is_none())
        .map(|o| flag(py, o, label))
        .transpose()
}

/// A search's query text: a str with UTF-8 form (a lone surrogate has none;
/// `coerce.clean` words the refusal). Whether it may be empty is the core's
/// to say (a search given a vector needs no words).
pub(crate) fn query<'a>(py: Python<'_>, obj: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let Ok(s) = obj.cast::<PyString>() else {
        return Err(invalid(
            py,
            format!("query must be a str, got {}", type_name(obj)),
        ));
    };
    s.to_str().map_err(|_| {
        let refused = py
            .import("memlane.coerce")
            .and_then(|c| c.getattr("clean"))
            .and_then(|clean| clean.call1((s, "query", true)));
        refused
            .err()
            .unwrap_or_else(|| invalid(py, "query is not valid Unicode"))
    })
}

/// A weights dict: known keys, numbers for values (the core checks them).
fn weights(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<[Option<f64>; 3]> {
    let Ok(map) = obj.cast::<PyMapping>() else {
        return Err(invalid(
            py,
            format!("weights must be a dict, got {}", type_name(obj)),
        ));
    };
    let names = memlane_core::engine::options::WEIGHT_NAMES;
    let mut out = [None; 3];
    let mut unknown = Vec::new();
    let mut values = Vec::new();
    for item in map.items()?.iter() {
        let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        let at = key.cast::<PyString>().ok().and_then(|k| {
            k.to_str()
                .ok()
                .and_then(|k| names.iter().position(|n| *n == k))
        });
        match at {
            Some(at) => values.push((at, key, value)),
            None => unknown.push(key),
        }
    }
    if !unknown.is_empty() {
        // Listed as coerce.names lists them: keys of mixed types do not sort together.
        let listed = |keys: Bound<'_, PyAny>| -> PyResult<String> {
            Ok(py
                .import("memlane.coerce")?
                .getattr("names")?
                .call1((keys,))?
                .repr()?
                .to_string())
        };
        return Err(invalid(
            py,
            format!(
                "unknown weight(s) {}; expected {}",
                listed(PyList::new(py, unknown)?.into_any())?,
                listed(PyList::new(py, names)?.into_any())?,
            ),
        ));
    }
    for (at, key, value) in values {
        out[at] = Some(number(py, &value, &format!("weights[{}]", repr(&key)))?);
    }
    Ok(out)
}

fn choice<'a>(
    py: Python<'_>,
    obj: &'a Bound<'_, PyAny>,
    label: &str,
    choices: &str,
) -> PyResult<&'a str> {
    // Borrowed: the string lives as long as `obj`. A str that is no UTF-8 (a lone
    // surrogate) is no choice either.
    match obj.cast::<PyString>().ok().and_then(|s| s.to_str().ok()) {
        Some(s) => Ok(s),
        None => Err(invalid(
            py,
            format!("{label} must be one of {choices}, got {}", repr(obj)),
        )),
    }
}

#[pymethods]
impl PySearchRequest {
    #[new]
    #[pyo3(signature = (
        k = None, *, mode = None, threshold = None, min_similarity = None, weights = None,
        decay = None, recency_half_life = None, fusion = None, rrf_k = None, alpha = None,
        candidates = None, explain = None, track_access = None, context_weight = None,
        speaker_weight = None, diversity = None, date_weight = None, when_weight = None,
        answer_weight = None, question_weight = None, table = None, r#type = None,
        scope = None, start = None, end = None, unique = None, filters = None, as_of = None,
        known_at = None, include_superseded = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        k: Option<&Bound<'_, PyAny>>,
        mode: Option<&Bound<'_, PyAny>>,
        threshold: Option<&Bound<'_, PyAny>>,
        min_similarity: Option<&Bound<'_, PyAny>>,
        weights: Option<&Bound<'_, PyAny>>,
        decay: Option<&Bound<'_, PyAny>>,
        recency_half_life: Option<&Bound<'_, PyAny>>,
        fusion: Option<&Bound<'_, PyAny>>,
        rrf_k: Option<&Bound<'_, PyAny>>,
        alpha: Option<&Bound<'_, PyAny>>,
        candidates: Option<&Bound<'_, PyAny>>,
        explain: Option<&Bound<'_, PyAny>>,
        track_access: Option<&Bound<'_, PyAny>>,
        context_weight: Option<&Bound<'_, PyAny>>,
        speaker_weight: Option<&Bound<'_, PyAny>>,
        diversity: Option<&Bound<'_, PyAny>>,
        date_weight: Option<&Bound<'_, PyAny>>,
        when_weight: Option<&Bound<'_, PyAny>>,
        answer_weight: Option<&Bound<'_, PyAny>>,
        question_weight: Option<&Bound<'_, PyAny>>,
        table: Option<&Bound<'_, PyAny>>,
        r#type: Option<&Bound<'_, PyAny>>,
        scope: Option<&Bound<'_, PyAny>>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        unique: Option<&Bound<'_, PyAny>>,
        filters: Option<&Bound<'_, PyAny>>,
        as_of: Option<&Bound<'_, PyAny>>,
        known_at: Option<&Bound<'_, PyAny>>,
        include_superseded: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let admitted = Args {
            table,
            r#type,
            scope,
            start: optional_number(py, start, "start")?,
            end: optional_number(py, end, "end")?,
            unique: optional_flag(py, unique, "unique")?,
            filter: filters,
        };
        let versions = conditions::versions(
            py,
            optional_number(py, as_of, "as_of")?,
            optional_number(py, known_at, "known_at")?,
            optional_flag(py, include_superseded, "include_superseded")?.unwrap_or(false),
        )?;
        let admits = admitted.conditions(py, versions)?;
        let k = k.map_or(Ok(5), |k| count(py, k, "k", 1))?;
        let mode = mode.map_or(Ok("hybrid"), |m| {
            choice(py, m, "mode", "{'hybrid', 'vector', 'text'}")
        })?;
        let weights = weights
            .filter(|w| !w.is_none())
            .map(|w| self::weights(py, w))
            .transpose()?;
        let given = Given {
            k,
            mode,
            threshold: optional_number(py, threshold, "threshold")?,
            min_similarity: optional_number(py, min_similarity, "min_similarity")?,
            weights,
            decay: optional_number(py, decay, "decay")?,
            recency_half_life: optional_number(py, recency_half_life, "recency_half_life")?,
            candidates: candidates
                .filter(|c| !c.is_none())
                .map(|c| count(py, c, "candidates", 1))
                .transpose()?,
            fusion: fusion.map_or(Ok("weighted"), |f| {
                choice(py, f, "fusion", "{'rrf', 'weighted'}")
            })?,
            rrf_k: optional_number(py, rrf_k, "rrf_k")?.unwrap_or(fusion::DEFAULT_RRF_K),
            alpha: optional_number(py, alpha, "alpha")?,
            context_weight: optional_number(py, context_weight, "context_weight")?
                .unwrap_or(fusion::DEFAULT_CONTEXT_WEIGHT),
            answer_weight: optional_number(py, answer_weight, "answer_weight")?
                .unwrap_or(fusion::DEFAULT_ANSWER_WEIGHT),
            question_weight: optional_number(py, question_weight, "question_weight")?
                .unwrap_or(fusion::DEFAULT_QUESTION_WEIGHT),
            speaker_weight: optional_number(py, speaker_weight, "speaker_weight")?
                .unwrap_or(fusion::DEFAULT_SPEAKER_WEIGHT),
            date_weight: optional_number(py, date_weight, "date_weight")?
                .unwrap_or(fusion::DEFAULT_DATE_WEIGHT),
            when_weight: optional_number(py, when_weight, "when_weight")?
                .unwrap_or(fusion::DEFAULT_WHEN_WEIGHT),
            explain: explain.map_or(Ok(false), |e| flag(py, e, "explain"))?,
            track_access: track_access
                .filter(|t| !t.is_none())
                .map(|t| flag(py, t, "track_access"))
                .transpose()?,
            diversity: optional_number(py, diversity, "diversity")?.unwrap_or(0.0),
        };
        let options = SearchOptions {
            admits,
            ..SearchOptions::new(&given).map_err(|e| to_py(py, e))?
        };
        Ok(PySearchRequest { options })
    }

    #[getter]
    fn k(&self) -> usize {
        self.options.k
    }

    #[getter]
    fn mode(&self) -> &'static str {
        match self.options.mode {
            Mode::Hybrid => "hybrid",
            Mode::Vector => "vector",
            Mode::Text => "text",
        }
    }

    #[getter]
    fn candidates(&self) -> usize {
        self.options.candidates
    }

    /// λ of maximal marginal relevance over the candidates (0: off).
    #[getter]
    fn diversity(&self) -> f64 {
        self.options.diversity
    }

    #[getter]
    fn explain(&self) -> bool {
        self.options.explain
    }

    /// Whether the search records an access of its hits; None: as the store says.
    #[getter]
    fn track_access(&self) -> Option<bool> {
        self.options.track_access
    }

    fn __repr__(&self) -> String {
        format!("SearchRequest({:?})", self.options)
    }
}
