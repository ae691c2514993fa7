//! Which retrievers a search runs. The options check it, the query path
//! follows it and the retrieval cache keys on it, so it sits below all three.

use crate::error::{Error, Result};
use crate::repr::py_str;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Hybrid,
    Vector,
    Text,
}

impl Mode {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "hybrid" => Ok(Mode::Hybrid),
            "vector" => Ok(Mode::Vector),
            "text" => Ok(Mode::Text),
            other => Err(Error::invalid(format!(
                "mode must be one of {{'hybrid', 'vector', 'text'}}, got {}",
                py_str(other)
            ))),
        }
    }
}
