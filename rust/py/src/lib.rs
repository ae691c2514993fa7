//! The private native module `memlane._core`: type conversion, GIL release and
//! error mapping around `memlane-core`. No engine logic lives here.

mod errors;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
