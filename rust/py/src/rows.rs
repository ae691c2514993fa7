//! Records as `Engine.prepare` takes them: rows of `memlane.schema.Row`, the
//! table's columns, derived from `MemoryRecord`'s fields. The engine finds the fields it reads
//! by name in the row type's `_fields`, once per type, and then reads each row
//! by position; a row type that lacks one is refused with the field's name.

use std::sync::Arc;

use memlane_core::engine::Attrs;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

use crate::errors::invalid;

/// Where each field the engine reads sits in a row of one type.
pub struct Layout {
    fields: Vec<String>,
    rowid: usize,
    id: usize,
    text: usize,
    tbl: usize,
    r#type: usize,
    scope: [usize; 6],
    importance: usize,
    evergreen: usize,
    metadata: usize,
    created_at: usize,
    updated_at: usize,
    last_accessed_at: usize,
    access_count: usize,
    valid_to: usize,
    expires_at: usize,
    recorded_at: usize,
    speaker: usize,
}

impl Layout {
    fn of(py: Python<'_>, ty: &Bound<'_, PyType>) -> PyResult<Self> {
        let fields: Vec<String> = ty
            .getattr("_fields")
            .and_then(|f| f.extract())
            .map_err(|_| invalid(py, format!("a row must be a memlane.schema.Row, got {ty}")))?;
        let at = |name: &str| {
            fields.iter().position(|f| f == name).ok_or_else(|| {
                invalid(
                    py,
                    format!(
                        "a row must have the field '{name}', which the engine reads \
                         (its fields: {})",
                        fields.join(", ")
                    ),
                )
            })
        };
        Ok(Self {
            rowid: at("rowid")?,
            id: at("id")?,
            text: at("text")?,
            tbl: at("tbl")?,
            r#type: at("type")?,
            scope: [
                at("agent_id")?,
                at("user_id")?,
                at("room_id")?,
                at("world_id")?,
                at("session_id")?,
                at("namespace")?,
            ],
            importance: at("importance")?,
            evergreen: at("evergreen")?,
            metadata: at("metadata")?,
            created_at: at("created_at")?,
            updated_at: at("updated_at")?,
            last_accessed_at: at("last_accessed_at")?,
            access_count: at("access_count")?,
            valid_to: at("valid_to")?,
            expires_at: at("expires_at")?,
            recorded_at: at("recorded_at")?,
            speaker: at("speaker")?,
            fields,
        })
    }
}

/// The layout of the row type last seen, which is nearly always `Row`.
static LAST: Mutex<Option<(Py<PyType>, Arc<Layout>)>> = Mutex::new(None);

/// The layout of `ty`'s rows.
fn layout(py: Python<'_>, ty: &Bound<'_, PyType>) -> PyResult<Arc<Layout>> {
    if let Some((seen, layout)) = &*LAST.lock() {
        if seen.bind(py).is(ty) {
            return Ok(Arc::clone(layout));
        }
    }
    // Found without the lock held: reading `_fields` runs Python code.
    let layout = Arc::new(Layout::of(py, ty)?);
    *LAST.lock() = Some((ty.clone().unbind(), Arc::clone(&layout)));
    Ok(layout)
}

/// Reads rows, resolving the layout once for a batch of one row type.
#[derive(Default)]
pub struct Reader<'py> {
    current: Option<(Bound<'py, PyType>, Arc<Layout>)>,
}

impl<'py> Reader<'py> {
    /// Row `i` as the engine's attributes, its id, its text (with `texts`) and
    /// its metadata's JSON text, flattened later without the GIL.
    pub fn attrs(
        &mut self,
        py: Python<'py>,
        i: usize,
        row: &Bound<'py, PyAny>,
        texts: bool,
    ) -> PyResult<(u64, Option<String>, Attrs, String)> {
        let row = row.cast::<PyTuple>().map_err(|_| {
            invalid(
                py,
                format!(
                    "record {i}: a row must be a memlane.schema.Row, got {}",
                    row.get_type()
                ),
            )
        })?;
        let ty = row.get_type();
        let l = match &self.current {
            Some((seen, l)) if seen.is(&ty) => Arc::clone(l),
            _ => {
                let l = layout(py, &ty)
                    .map_err(|e| invalid(py, format!("record {i}: {}", e.value(py))))?;
                self.current = Some((ty, Arc::clone(&l)));
                l
            }
        };
        if row.len() != l.fields.len() {
            return Err(invalid(
                py,
                format!(
                    "record {i}: a row has {} fields ({}), got {}",
                    l.fields.len(),
                    l.fields.join(", "),
                    row.len()
                ),
            ));
        }
        macro_rules! get {
            ($at:expr, $t:ty) => {
                row.get_borrowed_item($at)?.extract::<$t>().map_err(|e| {
                    invalid(
                        py,
                        format!(
                            "record {i}: field {:?} has a value of the wrong type: {e}",
                            l.fields[$at]
                        ),
                    )
                })?
            };
        }
        let mut scope: [Option<String>; 6] = Default::default();
        for (value, at) in scope.iter_mut().zip(l.scope) {
            *value = get!(at, Option<String>);
        }
        let mut attrs = Attrs {
            id: Some(get!(l.id, String)),
            tbl: get!(l.tbl, String),
            r#type: get!(l.r#type, String),
            scope,
            importance: get!(l.importance, f32),
            evergreen: get!(l.evergreen, i64) != 0,
            created_at: get!(l.created_at, f64),
            updated_at: get!(l.updated_at, f64),
            last_accessed_at: get!(l.last_accessed_at, f64),
            access_count: get!(l.access_count, u64),
            valid_to: get!(l.valid_to, Option<f64>),
            expires_at: get!(l.expires_at, Option<f64>),
            recorded_at: get!(l.recorded_at, f64),
            speaker: get!(l.speaker, Option<String>),
            metadata: Vec::new(),
        };
        let text = if texts || attrs.speaker_in_text() {
            Some(get!(l.text, String))
        } else {
            None
        };
        if let Some(text) = &text {
            attrs.read_speaker(text);
        }
        Ok((
            get!(l.rowid, u64),
            text.filter(|_| texts),
            attrs,
            get!(l.metadata, String),
        ))
    }
}
