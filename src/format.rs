//! Text forms the CLI and the server share: an error as one line, a batch as
//! JSON objects (NULL kept, NaN and infinities spelled as strings), and the
//! spelling of non-finite floats in text formats.
use crate::guard::catch_sync;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, FieldRef, Float16Type, Float32Type, Float64Type};
use arrow::error::ArrowError;
use arrow::json::writer::{make_encoder, Encoder, EncoderFactory, EncoderOptions, JsonArray, NullableEncoder};
use datafusion::error::{DataFusionError, Result};
use std::sync::{Arc, LazyLock};

/// An error as one line (DataFusion's position information kept). A caught
/// panic reads `internal error (please report it): MESSAGE`, without the
/// wrappers around it.
pub fn one_line(e: &DataFusionError) -> String {
    let s = e.to_string();
    let s = match s.find("internal error (please report it)") {
        Some(i) => &s[i..],
        None => &s,
    };
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How a machine format spells a non-finite float.
fn non_finite(v: f64) -> Option<&'static str> {
    if v.is_nan() {
        Some("NaN")
    } else if v == f64::INFINITY {
        Some("Infinity")
    } else if v == f64::NEG_INFINITY {
        Some("-Infinity")
    } else {
        None
    }
}

fn float_values(a: &dyn Array) -> Option<Box<dyn Fn(usize) -> f64 + '_>> {
    match a.data_type() {
        DataType::Float16 => {
            let p = a.as_primitive::<Float16Type>();
            Some(Box::new(move |i| p.value(i).to_f64()))
        }
        DataType::Float32 => {
            let p = a.as_primitive::<Float32Type>();
            Some(Box::new(move |i| p.value(i) as f64))
        }
        DataType::Float64 => {
            let p = a.as_primitive::<Float64Type>();
            Some(Box::new(move |i| p.value(i)))
        }
        _ => None,
    }
}

/// One batch as JSON objects `{..},{..}` (without the array's brackets): every
/// column kept (NULL is `null`), NaN and infinities spelled as strings. The CLI's
/// `--format json` and the server's JSON answers frame these into one array.
pub fn json_objects(b: &RecordBatch) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(b.num_rows() * 32);
    catch_sync(|| {
        let mut w = arrow::json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .with_encoder_factory(Arc::new(FloatSpelling))
            .build::<_, JsonArray>(&mut buf);
        w.write(b)?;
        w.finish()?;
        Ok(())
    })?;
    let inner = buf.strip_prefix(b"[").and_then(|x| x.strip_suffix(b"]")).map(|x| x.to_vec());
    Ok(inner.unwrap_or(buf))
}

/// JSON encoders for floats: the default encoding for finite values, the
/// strings of [`non_finite`] for the rest (arrow-json writes `null`).
#[derive(Debug)]
struct FloatSpelling;

/// The options the default float encoder runs under (no factory).
static PLAIN: LazyLock<EncoderOptions> = LazyLock::new(|| EncoderOptions::default().with_explicit_nulls(true));

struct FloatEncoder<'a> {
    value: Box<dyn Fn(usize) -> f64 + 'a>,
    inner: NullableEncoder<'a>,
}

impl Encoder for FloatEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        match non_finite((self.value)(idx)) {
            Some(s) => {
                out.push(b'"');
                out.extend_from_slice(s.as_bytes());
                out.push(b'"');
            }
            None => self.inner.encode(idx, out),
        }
    }
}

impl EncoderFactory for FloatSpelling {
    fn make_default_encoder<'a>(&self, field: &'a FieldRef, array: &'a dyn Array, _options: &'a EncoderOptions) -> std::result::Result<Option<NullableEncoder<'a>>, ArrowError> {
        let Some(value) = float_values(array) else { return Ok(None) };
        let inner = make_encoder(field, array, &PLAIN)?;
        Ok(Some(NullableEncoder::new(Box::new(FloatEncoder { value, inner }), array.nulls().cloned())))
    }
}

/// A float column with non-finite values as text (finite values exactly as the
/// CSV writer prints them); other columns unchanged.
pub fn spell_non_finite(a: &ArrayRef) -> Result<ArrayRef> {
    let Some(value) = float_values(a.as_ref()) else { return Ok(a.clone()) };
    if !(0..a.len()).any(|i| a.is_valid(i) && !value(i).is_finite()) {
        return Ok(a.clone());
    }
    let fmt = arrow::util::display::ArrayFormatter::try_new(a.as_ref(), &arrow::util::display::FormatOptions::default())?;
    let mut b = StringBuilder::with_capacity(a.len(), a.len() * 8);
    for i in 0..a.len() {
        if a.is_null(i) {
            b.append_null();
        } else if let Some(s) = non_finite(value(i)) {
            b.append_value(s);
        } else {
            b.append_value(fmt.value(i).to_string());
        }
    }
    Ok(Arc::new(b.finish()))
}

