//! The interactive shell: multi-line statements ended by `;`, history, and dot
//! commands (`.tables`, `.schema NAME`, `.timer on|off`, `.gpu off|auto|on`).
use super::output::{run_statements, Format};
use crate::{GpuMode, Ridgeline};
use datafusion::error::{DataFusionError, Result};
use std::io::Write;
use std::time::Instant;

const HELP: &str = ".tables             list tables
.schema NAME        show a table's columns
.timer on|off       print each statement's time
.gpu off|auto|on    where operators run
.format table|csv|json
.explain SQL        physical plan, GPU nodes marked
.help               this text
.quit               leave";

/// Shell state.
pub struct Shell {
    rl: Ridgeline,
    timer: bool,
    format: Format,
}

impl Shell {
    /// A shell over an engine.
    pub fn new(rl: Ridgeline) -> Self {
        Shell { rl, timer: false, format: Format::Table }
    }

    /// Handles a dot command; returns false on `.quit`.
    pub async fn dot(&mut self, line: &str, out: &mut dyn Write) -> Result<bool> {
        let mut parts = line.split_whitespace();
        let cmd = parts.next().unwrap_or("");
        let arg = parts.collect::<Vec<_>>().join(" ");
        let w = |out: &mut dyn Write, s: &str| writeln!(out, "{s}").map_err(|e| DataFusionError::External(Box::new(e)));
        match cmd {
            ".quit" | ".exit" | ".q" => return Ok(false),
            ".help" => w(out, HELP)?,
            ".tables" => {
                run_statements(&self.rl, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name", self.format, false, out).await?
            }
            ".schema" => {
                if arg.is_empty() {
                    return Err(DataFusionError::Plan(".schema needs a table name".into()));
                }
                let df = self.rl.session().table(arg.as_str()).await?;
                for f in df.schema().fields() {
                    w(out, &format!("{} {}{}", f.name(), f.data_type(), if f.is_nullable() { "" } else { " NOT NULL" }))?;
                }
            }
            ".timer" => match arg.as_str() {
                "on" => self.timer = true,
                "off" => self.timer = false,
                _ => return Err(DataFusionError::Plan(".timer on|off".into())),
            },
            ".gpu" => {
                if arg.is_empty() {
                    w(out, &format!("gpu mode: {}", self.rl.gpu_mode()?))?;
                } else {
                    let m: GpuMode = arg.parse().map_err(DataFusionError::Plan)?;
                    self.rl.set_gpu_mode(m)?;
                    w(out, &format!("gpu mode: {m}"))?;
                }
            }
            ".format" => self.format = arg.parse().map_err(DataFusionError::Plan)?,
            ".explain" => run_statements(&self.rl, &arg, self.format, true, out).await?,
            other => return Err(DataFusionError::Plan(format!("unknown command {other}; try .help"))),
        }
        Ok(true)
    }

    /// Runs a complete statement (or several).
    pub async fn statement(&mut self, sql: &str, out: &mut dyn Write) -> Result<()> {
        let t = Instant::now();
        run_statements(&self.rl, sql, self.format, false, out).await?;
        if self.timer {
            writeln!(out, "time: {:.3} ms", t.elapsed().as_secs_f64() * 1e3).map_err(|e| DataFusionError::External(Box::new(e)))?;
        }
        Ok(())
    }
}

/// Whether a buffered statement is complete: ends with `;` outside quotes/comments.
fn complete(buf: &str) -> bool {
    let t = buf.trim_end();
    t.ends_with(';') && !super::output::split_statements(t).is_empty()
}

/// Runs the shell on the terminal (or on piped standard input).
pub async fn run(rl: Ridgeline) -> Result<()> {
    let mut shell = Shell::new(rl);
    let mut editor = rustyline::DefaultEditor::new().map_err(|e| DataFusionError::External(Box::new(e)))?;
    let history = std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".ridgeline_history"));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    eprintln!("Ridgeline {} (gpu mode: {}); .help for commands, statements end with ';'", env!("CARGO_PKG_VERSION"), shell.rl.gpu_mode()?);
    let mut buf = String::new();
    loop {
        let prompt = if buf.is_empty() { "ridgeline> " } else { "      ...> " };
        match editor.readline(prompt) {
            Ok(line) => {
                if buf.is_empty() && line.trim_start().starts_with('.') {
                    let _ = editor.add_history_entry(line.as_str());
                    let mut out = std::io::stdout().lock();
                    match shell.dot(line.trim(), &mut out).await {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(e) => eprintln!("error: {}", super::one_line(&e)),
                    }
                    continue;
                }
                buf.push_str(&line);
                buf.push('\n');
                if complete(&buf) {
                    let _ = editor.add_history_entry(buf.trim());
                    let mut out = std::io::stdout().lock();
                    if let Err(e) = shell.statement(&buf, &mut out).await {
                        eprintln!("error: {}", super::one_line(&e));
                    }
                    buf.clear();
                }
            }
            Err(rustyline::error::ReadlineError::Interrupted) => buf.clear(),
            Err(_) => break,
        }
    }
    if !buf.trim().is_empty() {
        let mut out = std::io::stdout().lock();
        if let Err(e) = shell.statement(&buf, &mut out).await {
            eprintln!("error: {}", super::one_line(&e));
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
    }
    Ok(())
}
