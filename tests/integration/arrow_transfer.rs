//! Arrow arrays to the GPU and back: every supported type, with NULLs, at sizes
//! 0, 1, 257 and above the adapter's binding limit; round trips are bit-identical.
use arrow::array::*;
use arrow::datatypes::*;
use rand::{Rng, SeedableRng};
use ridgeline::gpu_batch::{download_column, upload_column, ColumnData, GpuBatch};
use ridgeline_operators::testing::test_context;
use std::sync::Arc;

fn arrays(n: usize, seed: u64, with_nulls: bool) -> Vec<ArrayRef> {
    let mut r = rand::rngs::SmallRng::seed_from_u64(seed);
    let valid = |r: &mut rand::rngs::SmallRng| !with_nulls || r.random_ratio(7, 10);
    macro_rules! prim {
        ($arr:ty, $gen:expr) => {{
            let v: $arr = (0..n).map(|_| if valid(&mut r) { Some($gen(&mut r)) } else { None }).collect();
            Arc::new(v) as ArrayRef
        }};
    }
    vec![
        prim!(Int8Array, |r: &mut rand::rngs::SmallRng| r.random::<i8>()),
        prim!(Int16Array, |r: &mut rand::rngs::SmallRng| r.random::<i16>()),
        prim!(Int32Array, |r: &mut rand::rngs::SmallRng| r.random::<i32>()),
        prim!(Int64Array, |r: &mut rand::rngs::SmallRng| r.random::<i64>()),
        prim!(UInt8Array, |r: &mut rand::rngs::SmallRng| r.random::<u8>()),
        prim!(UInt16Array, |r: &mut rand::rngs::SmallRng| r.random::<u16>()),
        prim!(UInt32Array, |r: &mut rand::rngs::SmallRng| r.random::<u32>()),
        prim!(UInt64Array, |r: &mut rand::rngs::SmallRng| r.random::<u64>()),
        prim!(Float32Array, |r: &mut rand::rngs::SmallRng| f32::from_bits(r.random::<u32>())),
        prim!(Float64Array, |r: &mut rand::rngs::SmallRng| f64::from_bits(r.random::<u64>())),
        prim!(Date32Array, |r: &mut rand::rngs::SmallRng| r.random_range(-100_000..100_000)),
        prim!(Date64Array, |r: &mut rand::rngs::SmallRng| r.random::<i64>()),
        Arc::new(
            (0..n).map(|_| if valid(&mut r) { Some(r.random::<i64>()) } else { None }).collect::<TimestampNanosecondArray>().with_timezone("+02:00"),
        ),
        prim!(TimestampSecondArray, |r: &mut rand::rngs::SmallRng| r.random::<i64>()),
        Arc::new(
            (0..n)
                .map(|_| if valid(&mut r) { Some(r.random_range(-999_999_999_999_999_999i128..=999_999_999_999_999_999)) } else { None })
                .collect::<Decimal128Array>()
                .with_precision_and_scale(18, 4)
                .unwrap(),
        ),
        prim!(BooleanArray, |r: &mut rand::rngs::SmallRng| r.random::<bool>()),
        prim!(StringArray, |r: &mut rand::rngs::SmallRng| format!("s{}", r.random::<u16>())),
    ]
}

fn check(n: usize, seed: u64, with_nulls: bool) {
    let Some(ctx) = test_context() else { return };
    for a in arrays(n, seed, with_nulls) {
        let col = upload_column(&ctx, &a).unwrap();
        assert_eq!(col.len, n);
        assert_eq!(col.null_count, a.null_count());
        if !matches!(a.data_type(), DataType::Utf8) {
            assert!(matches!(col.data, ColumnData::Device { .. }), "{} should be on the device", a.data_type());
        }
        let back = download_column(&ctx, &col).unwrap();
        assert_eq!(back.data_type(), a.data_type());
        assert_eq!(back.to_data(), a.to_data(), "round trip of {} (n={n}, nulls={with_nulls}) differs", a.data_type());
    }
}

#[test]
fn every_type_small_sizes() {
    for n in [0usize, 1, 2, 31, 32, 33, 257, 4099] {
        check(n, n as u64, true);
        check(n, n as u64 + 1000, false);
    }
}

#[test]
fn sliced_arrays_with_unaligned_offsets() {
    let Some(ctx) = test_context() else { return };
    for a in arrays(1000, 5, true) {
        let s = a.slice(13, 500);
        let back = download_column(&ctx, &upload_column(&ctx, &s).unwrap()).unwrap();
        assert_eq!(back.to_data(), s.to_data(), "sliced {}", a.data_type());
    }
}

#[test]
fn all_null_and_decimal_precision_limit() {
    let Some(ctx) = test_context() else { return };
    let a: ArrayRef = Arc::new(Int64Array::from(vec![None::<i64>; 100]));
    let back = download_column(&ctx, &upload_column(&ctx, &a).unwrap()).unwrap();
    assert_eq!(back.null_count(), 100);
    assert_eq!(back.to_data(), a.to_data());
    // precision 19 has no device layout: it stays on the host, unchanged
    let d: ArrayRef = Arc::new(Decimal128Array::from(vec![Some(i128::MAX / 3), None]).with_precision_and_scale(38, 0).unwrap());
    let col = upload_column(&ctx, &d).unwrap();
    assert!(matches!(col.data, ColumnData::Host(_)));
    assert_eq!(download_column(&ctx, &col).unwrap().to_data(), d.to_data());
}

#[test]
fn above_the_binding_limit_with_nulls() {
    let Some(ctx) = test_context() else { return };
    let limit = ctx.limits().max_storage_buffer_binding_size as usize;
    if limit > (256 << 20) {
        eprintln!("binding limit {limit}: exceeding it here would need too much memory; segmentation is covered by the operators tests");
        return;
    }
    let n = limit / 8 + 4097; // more bytes of i64 than one binding holds
    let a: ArrayRef = Arc::new(Int64Array::from_iter((0..n).map(|i| if i % 97 == 5 { None } else { Some((i as i64).wrapping_mul(-7_919)) })));
    let col = upload_column(&ctx, &a).unwrap();
    match &col.data {
        ColumnData::Device { values, validity, .. } => {
            assert!(values.num_segments() >= 2);
            assert!(validity.is_some());
        }
        _ => panic!("expected a device column"),
    }
    let back = download_column(&ctx, &col).unwrap();
    assert!(back.to_data() == a.to_data(), "round trip above the binding limit differs");
}

#[test]
fn batches_project_without_copies() {
    let Some(ctx) = test_context() else { return };
    let cols = arrays(300, 9, true);
    let schema = Arc::new(Schema::new(cols.iter().enumerate().map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true)).collect::<Vec<_>>()));
    let batch = RecordBatch::try_new(schema, cols).unwrap();
    let g = GpuBatch::upload(&ctx, &batch).unwrap();
    assert_eq!(g.download(&ctx).unwrap(), batch);
    let p = g.project(&[3, 0]).unwrap();
    assert!(Arc::ptr_eq(&p.columns[0], &g.columns[3]));
    assert_eq!(p.download(&ctx).unwrap(), batch.project(&[3, 0]).unwrap());
}

