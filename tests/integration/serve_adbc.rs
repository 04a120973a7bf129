//! A real Flight SQL client against `ridgeline serve`: Python's ADBC driver
//! (PyPI `adbc-driver-flightsql`, with pyarrow), installed on demand into the
//! project's own virtual environment (RIDGELINE_ADBC_VENV, default ./.venv-adbc).
//! Under CI=true a missing Python or a failed install fails the test; elsewhere it
//! is reported and skipped. Queries, errors, catalog browsing (`adbc_get_objects`,
//! `adbc_get_table_schema`, `adbc_get_table_types`) and bound parameters.
use crate::server;

use server::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

fn probe(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", "import adbc_driver_flightsql.dbapi, pyarrow"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A Python with the ADBC Flight SQL driver, or why there is none.
fn adbc_python() -> Result<PathBuf, String> {
    let venv = std::env::var_os("RIDGELINE_ADBC_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-adbc"));
    let py = venv_python(&venv);
    if probe(&py) {
        return Ok(py);
    }
    let run = |c: &mut Command, what: &str| -> Result<(), String> {
        let o = c.output().map_err(|e| format!("{what}: {e}"))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!("{what} failed:\n{}", String::from_utf8_lossy(&o.stderr)))
        }
    };
    if !py.exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv), "python3 -m venv")?;
    }
    run(
        Command::new(&py).args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "adbc-driver-flightsql", "pyarrow"]),
        "pip install adbc-driver-flightsql pyarrow",
    )?;
    if probe(&py) {
        Ok(py)
    } else {
        Err("adbc_driver_flightsql was installed but does not import".into())
    }
}

const SCRIPT: &str = r#"
import sys
import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager

uri, token = sys.argv[1], sys.argv[2]
conn = flight_sql.connect(uri, db_kwargs={"adbc.flight.sql.authorization_header": "Bearer " + token})
cur = conn.cursor()

cur.execute("SELECT count(*) AS n FROM nation")
assert cur.fetchone()[0] == 25

cur.execute("SELECT r_regionkey, r_name FROM region ORDER BY r_regionkey")
rows = cur.fetchall()
assert [r[1] for r in rows] == ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"], rows

cur.execute("SELECT l_returnflag, l_linestatus, count(*) AS c FROM lineitem GROUP BY 1, 2 ORDER BY 1, 2")
t = cur.fetch_arrow_table()
assert t.column_names == ["l_returnflag", "l_linestatus", "c"], t.column_names
assert t.num_rows == 4 and sum(t.column("c").to_pylist()) > 50000, t

# Ridgeline's own clause through a stock client.
cur.execute("SELECT count(*) FROM (SELECT * FROM part SKYLINE OF p_retailprice MIN, p_size MAX)")
assert cur.fetchone()[0] >= 1

# Errors come back as exceptions and the connection stays usable.
for bad, needle in [("SELECT * FRM nation", "Line: 1"), ("SELECT * FROM no_such_table", "no_such_table")]:
    try:
        cur.execute(bad)
        cur.fetchall()
        raise SystemExit("no error for " + bad)
    except adbc_driver_manager.Error as e:
        assert needle in str(e), str(e)
cur.execute("SELECT 41 + 1")
assert cur.fetchone()[0] == 42

# Browsing, as BI tools do: catalogs, schemas, tables and their columns.
TPCH = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]
objs = conn.adbc_get_objects().read_all().to_pylist()
cats = {c["catalog_name"]: c for c in objs}
assert list(cats) == ["datafusion"], objs
schemas = {s["db_schema_name"]: s for s in cats["datafusion"]["catalog_db_schemas"]}
assert list(schemas) == ["public"], schemas.keys()
tables = {t["table_name"]: t for t in schemas["public"]["db_schema_tables"]}
assert sorted(tables) == TPCH, sorted(tables)
assert all(t["table_type"] == "TABLE" for t in tables.values()), tables
cols = [(c["column_name"], c["ordinal_position"]) for c in tables["nation"]["table_columns"]]
assert cols == [("n_nationkey", 1), ("n_name", 2), ("n_regionkey", 3), ("n_comment", 4)], cols
objs = conn.adbc_get_objects(depth="tables", table_name_filter="part%").read_all().to_pylist()
names = sorted(t["table_name"] for c in objs for s in (c["catalog_db_schemas"] or []) for t in (s["db_schema_tables"] or []))
assert names == ["part", "partsupp"], names
objs = conn.adbc_get_objects(depth="db_schemas", db_schema_filter="nope%").read_all().to_pylist()
assert all(not c["catalog_db_schemas"] for c in objs), objs
schema = conn.adbc_get_table_schema("region")
assert schema.names == ["r_regionkey", "r_name", "r_comment"], schema
assert str(schema.field("r_regionkey").type) in ("int32", "int64"), schema
schema = conn.adbc_get_table_schema("lineitem", db_schema_filter="public")
assert len(schema.names) == 16 and schema.names[0] == "l_orderkey", schema
try:
    conn.adbc_get_table_schema("no_such_table")
    raise SystemExit("a schema for no_such_table")
except adbc_driver_manager.Error as e:
    pass
assert sorted(conn.adbc_get_table_types()) == ["LOCAL TEMPORARY", "TABLE", "VIEW"], conn.adbc_get_table_types()

# Parameters, `?` and `$n`, bound by the driver.
cur.execute("SELECT n_name FROM nation WHERE n_nationkey = ?", parameters=(5,))
assert cur.fetchall() == [("ETHIOPIA",)]
cur.execute("SELECT n_name FROM nation WHERE n_nationkey = ?", parameters=(7,))
assert cur.fetchall() == [("GERMANY",)]
cur.execute("SELECT count(*) FROM lineitem WHERE l_quantity < $1 AND l_returnflag = $2", parameters=(24, "R"))
bound = cur.fetchone()[0]
cur.execute("SELECT count(*) FROM lineitem WHERE l_quantity < 24 AND l_returnflag = 'R'")
assert bound == cur.fetchone()[0] and bound > 0, bound
cur.execute("SELECT ? AS s, ? + 1 AS n", parameters=("x", 41))
assert cur.fetchall() == [("x", 42)]
try:
    cur.execute("SELECT n_name FROM nation WHERE n_nationkey = ?", parameters=("five",))
    cur.fetchall()
    raise SystemExit("no error for a text key")
except adbc_driver_manager.Error as e:
    assert "does not convert" in str(e), str(e)
cur.execute("SELECT 41 + 1")
assert cur.fetchone()[0] == 42

# A wrong token is refused.
bad_conn = flight_sql.connect(uri, db_kwargs={"adbc.flight.sql.authorization_header": "Bearer wrong"})
try:
    c = bad_conn.cursor()
    c.execute("SELECT 1")
    c.fetchall()
    raise SystemExit("wrong token accepted")
except adbc_driver_manager.Error as e:
    assert "nauthenticated" in str(e) or "UNAUTHENTICATED" in str(e), str(e)
cur.close()
conn.close()
print("ADBC OK")
"#;

#[test]
fn adbc_flight_sql_driver_queries_ridgeline_serve() {
    let py = match adbc_python() {
        Ok(p) => p,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("CI needs the ADBC driver: {e}"),
        Err(e) => {
            eprintln!("skipped: no ADBC Flight SQL driver ({e})");
            return;
        }
    };
    let mut s = Server::start(&[]);
    let o = Command::new(py)
        .args(["-c", SCRIPT, &format!("grpc://{}", s.flight), TOKEN])
        .output()
        .expect("run python");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && out.contains("ADBC OK"), "ADBC client failed:\n{out}\n{err}\nserver:\n{}", s.stderr());
    assert!(s.alive());
}
