//! Values written into messages as Python's `repr` writes them. The core's
//! refusals reach Python callers word for word (`rust/py` maps the error's
//! kind, not its text), and the Python side checks some of the same values
//! with the same words, so a message reads the same whichever side refused.
//! Every checking module writes its messages with these, so they live below
//! all of them.

/// `x` as Python's `repr` writes it: the shortest digits that read back,
/// in exponent form below 1e-4 and from 1e16 on, the exponent signed and of
/// two digits at least (`1e-05`, `1.5e+16`), `nan` and `inf`.
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_owned();
    }
    // Rust's Debug form has the same digits and the same switch to exponents.
    let debug = format!("{x:?}");
    match debug.split_once('e') {
        None => debug,
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
    }
}

/// `s` as Python's `repr` writes a str (printable text; the quote Python picks).
pub fn py_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_python_writes_them() {
        for (x, want) in [
            (0.0, "0.0"),
            (-1.0, "-1.0"),
            (1.5, "1.5"),
            (1e-9, "1e-09"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e300, "1.5e+300"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ] {
            assert_eq!(py_float(x), want);
        }
        assert_eq!(py_str("relevance"), "'relevance'");
        assert_eq!(py_str("it's"), "\"it's\"");
    }
}
