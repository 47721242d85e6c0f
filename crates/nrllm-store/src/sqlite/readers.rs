//! Point reads past sqlx, on a few idle connections of their own.

use super::conn::*;
use crate::transition::{Row, Statement, Value};
use nrllm_core::run_store::StoreError;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Read-only connections to the file, used one at a time on the caller's thread.
#[derive(Debug)]
pub(crate) struct Readers {
    pub(super) path: PathBuf,
    pub(super) idle: Mutex<Vec<Conn>>,
}

/// Idle read connections kept open.
pub(super) const IDLE_READERS: usize = 8;

impl Readers {
    pub(crate) fn new(path: &Path) -> Readers {
        Readers {
            path: path.to_owned(),
            idle: Mutex::default(),
        }
    }

    /// The rows `statement` returns, read on this thread.
    pub(crate) fn query(&self, statement: &Statement) -> Result<Vec<Row>, StoreError> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut conn = match idle {
            Some(conn) => conn,
            None => Conn::new(self.open().map_err(sqlite)?),
        };
        let found = rows(&conn.db, &mut conn.shapes, statement, usize::MAX);
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < IDLE_READERS {
                idle.push(conn);
            }
        }
        found
    }

    pub(super) fn open(&self) -> Result<Connection, rusqlite::Error> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.set_prepared_statement_cache_capacity(PREPARED);
        Ok(conn)
    }
}

/// Runs `statement` to its end; the first `keep` rows it returned.
pub(super) fn rows(
    conn: &Connection,
    shapes: &mut Shapes,
    statement: &Statement,
    keep: usize,
) -> Result<Vec<Row>, StoreError> {
    let mut prepared = conn.prepare_cached(&statement.sql).map_err(sqlite)?;
    let shape = shapes.of(&statement.sql, &prepared)?;
    for (index, &arg) in shape.args.iter().enumerate() {
        let value = statement.args.get(arg).ok_or_else(|| {
            StoreError::Backend(format!("no value for parameter ${}", arg + 1).into())
        })?;
        match value {
            Value::Int(v) => prepared.raw_bind_parameter(index + 1, v),
            Value::Text(v) => prepared.raw_bind_parameter(index + 1, v),
        }
        .map_err(sqlite)?;
    }
    let columns = &shape.columns;
    let mut found = Vec::new();
    let mut cursor = prepared.raw_query();
    while let Some(row) = cursor.next().map_err(sqlite)? {
        if found.len() >= keep {
            continue;
        }
        let mut values = Vec::with_capacity(columns.len());
        for (i, name) in columns.iter().enumerate() {
            let value = match row.get_ref(i).map_err(sqlite)? {
                ValueRef::Null => Value::Text(None),
                ValueRef::Integer(n) => Value::Int(Some(n)),
                ValueRef::Text(bytes) => Value::Text(Some(
                    std::str::from_utf8(bytes)
                        .map_err(|err| StoreError::Corrupt(format!("column `{name}`: {err}")))?
                        .to_owned(),
                )),
                ValueRef::Real(_) | ValueRef::Blob(_) => {
                    return Err(StoreError::Corrupt(format!(
                        "column `{name}` has a type the store does not read"
                    )))
                }
            };
            values.push(value);
        }
        found.push(Row::new(Arc::clone(columns), values));
    }
    Ok(found)
}
