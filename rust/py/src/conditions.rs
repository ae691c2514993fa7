//! A read's conditions (`memlane_core::engine::Conditions`) from the
//! arguments of `SearchRequest` and of `Engine.count`, `ids_where` and
//! `groups`. Tables and types are checked here, with `memlane.coerce.text`'s
//! messages; scope values and times come checked by the Python layer (which
//! checks scopes for writes too, and reads datetimes), so they are only
//! converted; the core checks the versions and the caller's filter.

use memlane_core::engine::{Conditions, Versions, SCOPE_FIELDS};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyString};

use crate::convert::{self, type_name};
use crate::errors::{invalid, to_py};

/// Whitespace as Python's `str.strip` sees it: Unicode's, and the four
/// separators (U+001C to U+001F) Python counts too.
fn space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `coerce.text`: a non-empty str with no NUL and no lone surrogate.
fn text(py: Python<'_>, obj: &Bound<'_, PyAny>, label: &str) -> PyResult<String> {
    let Ok(s) = obj.cast::<PyString>() else {
        return Err(invalid(
            py,
            format!("{label} must be a str, got {}", type_name(obj)),
        ));
    };
    match s.to_str() {
        Ok(t) if !t.contains('\0') => {
            if t.trim_matches(space).is_empty() {
                Err(invalid(py, format!("{label} must not be empty")))
            } else {
                Ok(t.to_owned())
            }
        }
        // A refusal `coerce.clean` words (where the character is, as Python counts).
        _ => {
            let refused = py
                .import("memlane.coerce")?
                .getattr("clean")?
                .call1((s, label));
            Err(refused.err().unwrap_or_else(|| {
                invalid(py, format!("{label} is not text both databases store"))
            }))
        }
    }
}

/// A str, or an iterable of them (any of which a record's field may equal);
/// not a mapping, whose keys alone would be read (a JSON object over HTTP).
fn texts(
    py: Python<'_>,
    obj: Option<&Bound<'_, PyAny>>,
    label: &str,
) -> PyResult<Option<Vec<String>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if obj.cast::<PyString>().is_ok() {
        return Ok(Some(vec![text(py, obj, label)?]));
    }
    let items = match obj.cast::<PyMapping>() {
        Ok(_) => None,
        Err(_) => obj.try_iter().ok(),
    };
    let Some(items) = items else {
        return Err(invalid(
            py,
            format!(
                "{label} must be a str or a list of str, got {}",
                type_name(obj)
            ),
        ));
    };
    let mut out = Vec::new();
    for item in items {
        if out.len() == MAX_VALUES {
            // An endless iterable would otherwise be read until memory runs out, which
            // aborts the process.
            return Err(invalid(
                py,
                format!("{label} has more than {MAX_VALUES} values"),
            ));
        }
        out.push(text(py, &item?, label)?);
    }
    Ok(Some(out))
}

/// The most values a condition on one field takes (far more than a store has kinds).
const MAX_VALUES: usize = 1 << 16;

/// The scope fields a dict gives (`scoping.scope_of`'s, checked there).
fn scope(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<[Option<String>; 6]> {
    let mut out: [Option<String>; 6] = Default::default();
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(out);
    };
    let Ok(dict) = obj.cast::<PyDict>() else {
        return Err(invalid(
            py,
            format!("scope must be a dict, got {}", type_name(obj)),
        ));
    };
    for (key, value) in dict.iter() {
        let at = key
            .cast::<PyString>()
            .ok()
            .and_then(|k| k.to_str().ok())
            .and_then(|k| SCOPE_FIELDS.iter().position(|f| *f == k));
        let Some(at) = at else {
            return Err(invalid(py, format!("unknown scope field {}", key.repr()?)));
        };
        let given = value.cast::<PyString>().ok().and_then(|v| v.to_str().ok());
        out[at] = Some(match given {
            Some(v) => v.to_owned(),
            None => text(py, &value, SCOPE_FIELDS[at])?,
        });
    }
    Ok(out)
}

/// The arguments that say which records a read admits.
pub struct Args<'a, 'py> {
    pub table: Option<&'a Bound<'py, PyAny>>,
    pub r#type: Option<&'a Bound<'py, PyAny>>,
    pub scope: Option<&'a Bound<'py, PyAny>>,
    pub start: Option<f64>,
    pub end: Option<f64>,
    pub unique: Option<bool>,
    pub filter: Option<&'a Bound<'py, PyAny>>,
}

impl Args<'_, '_> {
    /// The conditions, admitting `versions`.
    pub fn conditions(&self, py: Python<'_>, versions: Versions) -> PyResult<Conditions> {
        Ok(Conditions {
            tables: texts(py, self.table, "table")?,
            types: texts(py, self.r#type, "type")?,
            scope: scope(py, self.scope)?,
            start: self.start,
            end: self.end,
            unique: self.unique,
            versions,
            filter: self
                .filter
                .filter(|f| !f.is_none())
                .map(|f| convert::filter(py, f))
                .transpose()?,
        })
    }
}

/// The records a listing or a write admits, every version of them: checked
/// and built once, then handed to `Engine.count`, `ids_where` and `groups`
/// as one value (`memlane._core.Admits`).
#[pyclass(module = "memlane._core", name = "Admits", frozen)]
pub struct PyAdmits {
    pub inner: Conditions,
}

impl PyAdmits {
    /// The conditions of `admits`, or every version of every record.
    pub fn of(admits: Option<&PyAdmits>) -> Conditions {
        admits.map_or_else(
            || Conditions {
                versions: Versions::Every,
                ..Conditions::default()
            },
            |a| a.inner.clone(),
        )
    }
}

#[pymethods]
impl PyAdmits {
    /// `filter` a dict of the filter grammar; the tables, types, scope (a
    /// dict of scope fields), creation times `[start, end)` and `unique` flag
    /// given; every version of the records.
    #[new]
    #[pyo3(signature = (
        filter = None, *, table = None, r#type = None, scope = None, start = None, end = None,
        unique = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        filter: Option<&Bound<'_, PyAny>>,
        table: Option<&Bound<'_, PyAny>>,
        r#type: Option<&Bound<'_, PyAny>>,
        scope: Option<&Bound<'_, PyAny>>,
        start: Option<f64>,
        end: Option<f64>,
        unique: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let args = Args {
            table,
            r#type,
            scope,
            start,
            end,
            unique: crate::search::optional_flag(py, unique, "unique")?,
            filter,
        };
        Ok(PyAdmits {
            inner: args.conditions(py, Versions::Every)?,
        })
    }
}

/// The versions a search's `as_of`, `known_at` and `include_superseded` ask for.
pub fn versions(
    py: Python<'_>,
    as_of: Option<f64>,
    known_at: Option<f64>,
    every: bool,
) -> PyResult<Versions> {
    Versions::new(as_of, known_at, every).map_err(|e| to_py(py, e))
}
