//! TPC-H data generation on top of the `tpchgen` / `tpchgen-arrow` crates.
//!
//! Every table is generated as Arrow [`RecordBatch`]es. A table is split into
//! `part_count` parts (1-based `part` numbers, the same partitioning that
//! `dbgen -C/-S` uses); the parts are independent, so they are generated in
//! parallel with rayon and concatenated in part order, which makes the output
//! deterministic and independent of the number of parts.
//!
//! Column types are those of `tpchgen-arrow`: keys are `Int64`, small integers
//! `Int32`, money and quantities `Decimal128(15, 2)`, dates `Date32` and all
//! strings `Utf8View`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use rayon::prelude::*;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

/// The eight TPC-H tables, in the order they are generated and written.
pub const TPCH_TABLES: [&str; 8] = [
    "nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem",
];

/// Rows per generated batch.
const BATCH_SIZE: usize = 8192;
/// Rows per Parquet row group.
const ROW_GROUP_ROWS: usize = 1024 * 1024;
/// `generate_table` gives each part at least this many "unit" rows
/// (parts for partsupp, orders for lineitem).
const MIN_UNITS_PER_PART: i64 = 8192;
/// `write_tpch` generates one wave of parts (one per thread) at a time; a wave
/// holds about this many rows, so at most two waves (one being written, one
/// being generated) are in memory.
const WAVE_ROWS: u64 = 1 << 20;
/// Bounds for the rows of one part while writing.
const MIN_WRITE_PART_ROWS: u64 = 16 * 1024;
const MAX_WRITE_PART_ROWS: u64 = 256 * 1024;

type BatchIter = Box<dyn Iterator<Item = std::result::Result<RecordBatch, ArrowError>> + Send>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Table {
    Nation,
    Region,
    Part,
    Supplier,
    PartSupp,
    Customer,
    Orders,
    LineItem,
}

impl Table {
    fn parse(name: &str) -> Result<Self> {
        Ok(match name.trim().to_ascii_lowercase().as_str() {
            "nation" => Table::Nation,
            "region" => Table::Region,
            "part" => Table::Part,
            "supplier" => Table::Supplier,
            "partsupp" => Table::PartSupp,
            "customer" => Table::Customer,
            "orders" => Table::Orders,
            "lineitem" => Table::LineItem,
            _ => {
                return Err(DataFusionError::Plan(format!(
                    "unknown TPC-H table '{name}', expected one of: {}",
                    TPCH_TABLES.join(", ")
                )))
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Table::Nation => "nation",
            Table::Region => "region",
            Table::Part => "part",
            Table::Supplier => "supplier",
            Table::PartSupp => "partsupp",
            Table::Customer => "customer",
            Table::Orders => "orders",
            Table::LineItem => "lineitem",
        }
    }

    fn schema(self) -> SchemaRef {
        match self {
            Table::Nation => NationArrow::schema_ref(),
            Table::Region => RegionArrow::schema_ref(),
            Table::Part => PartArrow::schema_ref(),
            Table::Supplier => SupplierArrow::schema_ref(),
            Table::PartSupp => PartSuppArrow::schema_ref(),
            Table::Customer => CustomerArrow::schema_ref(),
            Table::Orders => OrderArrow::schema_ref(),
            Table::LineItem => LineItemArrow::schema_ref(),
        }
    }

    /// Number of rows the partitioning is done over: parts for partsupp
    /// (four rows each), orders for lineitem (one to seven rows each).
    fn unit_rows(self, sf: f64) -> i64 {
        match self {
            Table::Nation => 25,
            Table::Region => 5,
            Table::Part => PartGenerator::calculate_row_count(sf, 1, 1),
            Table::Supplier => SupplierGenerator::calculate_row_count(sf, 1, 1),
            Table::PartSupp => PartSuppGenerator::calculate_row_count(sf, 1, 1),
            Table::Customer => CustomerGenerator::calculate_row_count(sf, 1, 1),
            Table::Orders | Table::LineItem => OrderGenerator::calculate_row_count(sf, 1, 1),
        }
    }

    /// Row count of the table: exact except for lineitem, where it is the
    /// expected value (four lines per order on average).
    fn estimated_rows(self, sf: f64) -> u64 {
        match self {
            Table::PartSupp => 4 * self.unit_rows(sf).max(0) as u64,
            Table::LineItem => (6_000_000.0 * sf) as u64,
            _ => self.unit_rows(sf).max(0) as u64,
        }
    }

    /// Nation and region ignore the scale factor and the partitioning, so
    /// they must be generated as a single part.
    fn splittable(self) -> bool {
        !matches!(self, Table::Nation | Table::Region)
    }

    /// Clamp a wanted number of parts so that every part gets at least one
    /// unit row.
    fn clamp_parts(self, sf: f64, wanted: u64) -> i32 {
        if !self.splittable() {
            return 1;
        }
        let max = self.unit_rows(sf).clamp(1, i32::MAX as i64) as u64;
        wanted.clamp(1, max) as i32
    }

    /// Batches of one part (`part` is 1-based).
    fn part_batches(self, sf: f64, part: i32, parts: i32) -> BatchIter {
        match self {
            Table::Nation => Box::new(
                NationArrow::new(NationGenerator::new(sf, part, parts)).with_batch_size(BATCH_SIZE),
            ),
            Table::Region => Box::new(
                RegionArrow::new(RegionGenerator::new(sf, part, parts)).with_batch_size(BATCH_SIZE),
            ),
            Table::Part => Box::new(
                PartArrow::new(PartGenerator::new(sf, part, parts)).with_batch_size(BATCH_SIZE),
            ),
            Table::Supplier => Box::new(
                SupplierArrow::new(SupplierGenerator::new(sf, part, parts))
                    .with_batch_size(BATCH_SIZE),
            ),
            Table::PartSupp => Box::new(
                PartSuppArrow::new(PartSuppGenerator::new(sf, part, parts))
                    .with_batch_size(BATCH_SIZE),
            ),
            Table::Customer => Box::new(
                CustomerArrow::new(CustomerGenerator::new(sf, part, parts))
                    .with_batch_size(BATCH_SIZE),
            ),
            Table::Orders => Box::new(
                OrderArrow::new(OrderGenerator::new(sf, part, parts)).with_batch_size(BATCH_SIZE),
            ),
            Table::LineItem => Box::new(
                LineItemArrow::new(LineItemGenerator::new(sf, part, parts))
                    .with_batch_size(BATCH_SIZE),
            ),
        }
    }

    /// All batches of one part.
    fn generate_part(self, sf: f64, part: i32, parts: i32) -> Result<Vec<RecordBatch>> {
        Ok(self
            .part_batches(sf, part, parts)
            .collect::<std::result::Result<Vec<_>, ArrowError>>()?)
    }
}

fn check_sf(sf: f64) -> Result<()> {
    // The largest official scale factor is 100000; well above it the row
    // counts no longer fit the generator's key arithmetic.
    if sf.is_finite() && sf > 0.0 && sf <= 1_000_000.0 {
        Ok(())
    } else {
        Err(DataFusionError::Plan(format!(
            "invalid TPC-H scale factor {sf}: it must be a number in (0, 1000000]"
        )))
    }
}

/// Arrow schema of a TPC-H table (`table` is one of [`TPCH_TABLES`]).
pub fn table_schema(table: &str) -> Result<SchemaRef> {
    Ok(Table::parse(table)?.schema())
}

/// Generate parts `1..=parts` of a table in parallel and concatenate them in
/// part order.
fn generate_parts(table: Table, sf: f64, parts: i32) -> Result<Vec<RecordBatch>> {
    let per_part = (1..=parts)
        .into_par_iter()
        .map(|part| table.generate_part(sf, part, parts))
        .collect::<Result<Vec<_>>>()?;
    Ok(per_part.into_iter().flatten().collect())
}

/// Generate a whole TPC-H table in memory, in batches of about 8192 rows.
///
/// The parts are generated in parallel (about one per rayon thread) and
/// concatenated in part order, so the result is deterministic.
pub fn generate_table(table: &str, sf: f64) -> Result<Vec<RecordBatch>> {
    let table = Table::parse(table)?;
    check_sf(sf)?;
    let threads = rayon::current_num_threads().max(1) as u64;
    let wanted = (table.unit_rows(sf).max(0) as u64 / MIN_UNITS_PER_PART as u64).min(threads);
    let parts = table.clamp_parts(sf, wanted);
    generate_parts(table, sf, parts)
}

/// Generate all eight tables in memory, in the order of [`TPCH_TABLES`].
pub fn generate_all(sf: f64) -> Result<Vec<(String, Vec<RecordBatch>)>> {
    check_sf(sf)?;
    TPCH_TABLES
        .iter()
        .map(|name| Ok((name.to_string(), generate_table(name, sf)?)))
        .collect()
}

/// File format for [`write_tpch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Parquet,
    Csv,
}

impl OutputFormat {
    fn extension(self) -> &'static str {
        match self {
            OutputFormat::Parquet => "parquet",
            OutputFormat::Csv => "csv",
        }
    }
}

impl FromStr for OutputFormat {
    type Err = DataFusionError;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "parquet" => Ok(OutputFormat::Parquet),
            "csv" => Ok(OutputFormat::Csv),
            _ => Err(DataFusionError::Plan(format!(
                "unknown output format '{s}', expected 'parquet' or 'csv'"
            ))),
        }
    }
}

impl std::fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.extension())
    }
}

/// A file being written, batch by batch.
enum Sink {
    Parquet(ArrowWriter<BufWriter<File>>),
    Csv(arrow::csv::Writer<BufWriter<File>>),
}

impl Sink {
    fn create(path: &Path, format: OutputFormat, schema: SchemaRef) -> Result<Self> {
        let file = BufWriter::with_capacity(1 << 20, File::create(path)?);
        Ok(match format {
            OutputFormat::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(Compression::ZSTD(ZstdLevel::default()))
                    .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
                    .build();
                Sink::Parquet(ArrowWriter::try_new(file, schema, Some(props))?)
            }
            OutputFormat::Csv => Sink::Csv(
                arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(file),
            ),
        })
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match self {
            Sink::Parquet(w) => w.write(batch)?,
            Sink::Csv(w) => w.write(batch)?,
        }
        Ok(())
    }

    fn finish(self) -> Result<()> {
        let mut file = match self {
            Sink::Parquet(w) => w.into_inner()?,
            Sink::Csv(w) => w.into_inner(),
        };
        file.flush()?;
        Ok(())
    }
}

/// Write generated parts to the sink, in order.
fn write_parts(
    sink: &mut Sink,
    parts: Vec<Vec<RecordBatch>>,
    progress: Option<&ProgressBar>,
) -> Result<()> {
    for batch in parts.into_iter().flatten() {
        sink.write(&batch)?;
        if let Some(pb) = progress {
            pb.inc(batch.num_rows() as u64);
        }
    }
    Ok(())
}

/// Stream one table into `path`: parts are generated a wave (one part per
/// thread) at a time, while the previous wave is being written.
fn write_table(
    table: Table,
    sf: f64,
    path: &Path,
    format: OutputFormat,
    progress: Option<&ProgressBar>,
) -> Result<()> {
    let threads = rayon::current_num_threads().max(1);
    let rows_per_part =
        (WAVE_ROWS / threads as u64).clamp(MIN_WRITE_PART_ROWS, MAX_WRITE_PART_ROWS);
    let parts = table.clamp_parts(sf, table.estimated_rows(sf).div_ceil(rows_per_part));

    let mut sink = Sink::create(path, format, table.schema())?;
    let part_numbers: Vec<i32> = (1..=parts).collect();
    let mut pending: Vec<Vec<RecordBatch>> = Vec::new();
    for wave in part_numbers.chunks(threads) {
        let to_write = std::mem::take(&mut pending);
        let sink_ref = &mut sink;
        let (written, generated) = rayon::join(
            move || write_parts(sink_ref, to_write, progress),
            || {
                wave.par_iter()
                    .map(|&part| table.generate_part(sf, part, parts))
                    .collect::<Result<Vec<_>>>()
            },
        );
        written?;
        pending = generated?;
    }
    write_parts(&mut sink, pending, progress)?;
    sink.finish()
}

/// The tables' files that [`write_tpch`] would write in `out` and that exist already.
pub fn existing_files(out: &Path, format: OutputFormat) -> Vec<PathBuf> {
    TPCH_TABLES.iter().map(|t| out.join(format!("{t}.{}", format.extension()))).filter(|p| p.exists()).collect()
}

/// Write all eight TPC-H tables at scale factor `sf` into the directory
/// `out` (created if needed), one file per table: `out/<table>.parquet`
/// (zstd, row groups of 1Mi rows) or `out/<table>.csv` (with a header line).
///
/// Tables are streamed: only a bounded number of rows is in memory at any
/// time. With `progress`, a progress bar on stderr counts the rows over all
/// tables (the lineitem total is an estimate). Returns the written paths in
/// the order of [`TPCH_TABLES`].
pub fn write_tpch(
    sf: f64,
    out: &Path,
    format: OutputFormat,
    progress: bool,
) -> Result<Vec<PathBuf>> {
    check_sf(sf)?;
    std::fs::create_dir_all(out)?;
    let tables: Vec<Table> = TPCH_TABLES
        .iter()
        .map(|name| Table::parse(name))
        .collect::<Result<_>>()?;

    let bar = if progress {
        let total: u64 = tables.iter().map(|t| t.estimated_rows(sf)).sum();
        let style = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {human_pos}/{human_len} rows \
             ({per_sec}, eta {eta}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        Some(
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
                .with_style(style),
        )
    } else {
        None
    };

    let mut paths = Vec::with_capacity(tables.len());
    for table in tables {
        let path = out.join(format!("{}.{}", table.name(), format.extension()));
        if let Some(pb) = &bar {
            pb.set_message(table.name());
        }
        write_table(table, sf, &path, format, bar.as_ref())?;
        paths.push(path);
    }
    if let Some(pb) = &bar {
        // The lineitem total was an estimate: settle on the real count.
        pb.set_length(pb.position());
        pb.finish_with_message("done");
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::compute::concat_batches;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::io::{BufRead, BufReader};

    const SF: f64 = 0.01;
    /// lineitem rows at SF 0.01 as tpchgen 4.0.0 generates them.
    const LINEITEM_SF001: usize = 60_175;

    fn rows(batches: &[RecordBatch]) -> usize {
        batches.iter().map(|b| b.num_rows()).sum()
    }

    fn expected_rows(table: &str) -> usize {
        match table {
            "nation" => 25,
            "region" => 5,
            "part" => 2000,
            "supplier" => 100,
            "partsupp" => 8000,
            "customer" => 1500,
            "orders" => 15_000,
            "lineitem" => LINEITEM_SF001,
            _ => unreachable!(),
        }
    }

    #[test]
    fn row_counts_sf001() {
        for table in TPCH_TABLES {
            let batches = generate_table(table, SF).unwrap();
            let n = rows(&batches);
            assert_eq!(n, expected_rows(table), "{table}");
            let schema = table_schema(table).unwrap();
            for b in &batches {
                assert_eq!(b.schema(), schema, "{table}");
                assert!(b.num_rows() <= BATCH_SIZE);
            }
        }
        let li = LINEITEM_SF001 as f64;
        assert!((li - 60_000.0).abs() / 60_000.0 < 0.01);
    }

    #[test]
    fn generate_all_matches_tables() {
        let all = generate_all(SF).unwrap();
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, TPCH_TABLES);
        for (name, batches) in &all {
            assert_eq!(rows(batches), expected_rows(name), "{name}");
        }
    }

    #[test]
    fn deterministic() {
        for table in ["orders", "lineitem", "partsupp"] {
            let a = generate_table(table, SF).unwrap();
            let b = generate_table(table, SF).unwrap();
            assert_eq!(a, b, "{table}");
        }
    }

    #[test]
    fn independent_of_part_count() {
        for table in [Table::LineItem, Table::PartSupp, Table::Customer] {
            let schema = table.schema();
            let one = concat_batches(&schema, &generate_parts(table, SF, 1).unwrap()).unwrap();
            let five = concat_batches(&schema, &generate_parts(table, SF, 5).unwrap()).unwrap();
            assert_eq!(one, five, "{table:?}");
        }
    }

    #[test]
    fn schema_types() {
        use arrow::datatypes::DataType;
        let li = table_schema("lineitem").unwrap();
        assert_eq!(li.fields().len(), 16);
        assert_eq!(
            li.field_with_name("l_orderkey").unwrap().data_type(),
            &DataType::Int64
        );
        assert_eq!(
            li.field_with_name("l_extendedprice").unwrap().data_type(),
            &DataType::Decimal128(15, 2)
        );
        assert_eq!(
            li.field_with_name("l_shipdate").unwrap().data_type(),
            &DataType::Date32
        );
        assert_eq!(
            li.field_with_name("l_comment").unwrap().data_type(),
            &DataType::Utf8View
        );
        assert!(table_schema("LineItem").is_ok());
    }

    #[test]
    fn errors() {
        let e = table_schema("lineitems").unwrap_err().to_string();
        assert!(e.contains("unknown TPC-H table"), "{e}");
        assert!(generate_table("foo", SF).is_err());
        assert!(generate_table("nation", 0.0).is_err());
        assert!(generate_table("nation", -1.0).is_err());
        assert!(generate_table("nation", f64::NAN).is_err());
        assert!(generate_all(f64::INFINITY).is_err());
        assert_eq!(
            "parquet".parse::<OutputFormat>().unwrap(),
            OutputFormat::Parquet
        );
        assert_eq!("CSV".parse::<OutputFormat>().unwrap(), OutputFormat::Csv);
        let e = "json".parse::<OutputFormat>().unwrap_err().to_string();
        assert!(e.contains("'parquet' or 'csv'"), "{e}");
    }

    #[test]
    fn write_parquet_and_csv() {
        let dir = tempfile::tempdir().unwrap();
        for format in [OutputFormat::Parquet, OutputFormat::Csv] {
            let out = dir.path().join(format.to_string());
            let paths = write_tpch(SF, &out, format, false).unwrap();
            assert_eq!(paths.len(), TPCH_TABLES.len());
            for (table, path) in TPCH_TABLES.iter().zip(&paths) {
                assert_eq!(path, &out.join(format!("{table}.{format}")));
                let expected = rows(&generate_table(table, SF).unwrap());
                let got = match format {
                    OutputFormat::Parquet => {
                        let reader =
                            ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
                                .unwrap()
                                .build()
                                .unwrap();
                        let mut n = 0;
                        for batch in reader {
                            let batch = batch.unwrap();
                            assert_eq!(batch.schema(), table_schema(table).unwrap());
                            n += batch.num_rows();
                        }
                        n
                    }
                    OutputFormat::Csv => {
                        let lines: Vec<String> = BufReader::new(File::open(path).unwrap())
                            .lines()
                            .collect::<std::result::Result<_, _>>()
                            .unwrap();
                        let schema = table_schema(table).unwrap();
                        let header: Vec<&str> =
                            schema.fields().iter().map(|f| f.name().as_str()).collect();
                        assert_eq!(lines[0], header.join(","));
                        lines.len() - 1
                    }
                };
                assert_eq!(got, expected, "{table} ({format})");
            }
        }
    }

    /// The 22 queries in `sql/tpch` parse, plan and run on SF 0.01 data.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tpch_queries_run() {
        use datafusion::datasource::MemTable;
        use datafusion::prelude::SessionContext;
        use std::sync::Arc;

        let ctx = SessionContext::new();
        for (name, batches) in generate_all(SF).unwrap() {
            let schema = table_schema(&name).unwrap();
            let table = MemTable::try_new(schema, vec![batches]).unwrap();
            ctx.register_table(name.as_str(), Arc::new(table)).unwrap();
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/tpch");
        for q in 1..=22 {
            let path = dir.join(format!("q{q}.sql"));
            let sql = std::fs::read_to_string(&path).unwrap();
            assert!(sql.starts_with(&format!("-- TPC-H Q{q}: ")), "q{q} header");
            assert!(sql.trim_end().ends_with(';'), "q{q} must end with ';'");
            let df = ctx
                .sql(&sql)
                .await
                .unwrap_or_else(|e| panic!("q{q} failed to plan: {e}"));
            let out = df
                .collect()
                .await
                .unwrap_or_else(|e| panic!("q{q} failed to run: {e}"));
            let n = rows(&out);
            println!("q{q}: {n} rows");
            match q {
                1 => assert_eq!(n, 4, "q1"),
                4 | 12 | 22 => assert!(n > 0, "q{q} returned no rows"),
                6 | 14 | 17 | 19 => assert_eq!(n, 1, "q{q}"),
                _ => {}
            }
        }
    }
}
