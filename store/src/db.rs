//! Opening the database and running statements on it.

use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The file name of the database inside the data dir.
pub const FILE_NAME: &str = "faas.db";

/// Why the database could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be opened or set up.
    #[error("opening the state database {path}: {source}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// A statement failed.
    #[error("state database: {doing}: {source}")]
    Sql {
        /// What was being done, e.g. `saving workflow hello`.
        doing: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
}

impl StoreError {
    /// Wraps a statement's error with what was being done.
    pub fn sql(doing: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> Self {
        let doing = doing.into();
        move |source| Self::Sql { doing, source }
    }
}

/// The tables every module needs, created when missing. Each statement must be
/// idempotent (`CREATE ... IF NOT EXISTS`), so opening an older file adds what it lacks.
const SCHEMA: &[&str] = &[
    crate::kv::SCHEMA,
    crate::deployments::SCHEMA,
    crate::tenants::SCHEMA,
];

/// A handle on the state database; clones share one connection, and the connections
/// that only read ([`Database::read`]).
///
/// Every operation is a short statement or transaction on a local file, so callers
/// run it in place rather than on a blocking thread.
#[derive(Clone)]
pub struct Database {
    connection: Arc<Mutex<Connection>>,
    /// `None` for a database in memory, which has no file other connections could open.
    readers: Option<Arc<Readers>>,
}

/// Read-only connections to the database's file, kept open between reads.
struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    fn open(&self) -> Result<Connection, rusqlite::Error> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = Connection::open_with_flags(&self.path, flags)?;
        connection.busy_timeout(BUSY_TIMEOUT)?;
        Ok(connection)
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How long a statement waits for a lock another process (or connection) holds.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Database {
    /// Opens (or creates) `<dir>/faas.db` and its tables.
    ///
    /// # Errors
    /// [`StoreError::Open`] naming the file.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join(FILE_NAME);
        let error = |source| StoreError::Open {
            path: path.clone(),
            source,
        };
        let connection = Connection::open(&path).map_err(error)?;
        // WAL: a commit is one append to the log, readers never block the writer, and a
        // process killed mid-commit leaves the previous state. NORMAL skips the fsync
        // per commit (durable against a crash of this process, not against power loss).
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(error)?;
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(error)?;
        connection.busy_timeout(BUSY_TIMEOUT).map_err(error)?;
        let mut database = Self::set_up(connection).map_err(error)?;
        database.readers = Some(Arc::new(Readers {
            path,
            idle: Mutex::default(),
        }));
        Ok(database)
    }

    /// A database in memory, for tests.
    ///
    /// # Errors
    /// If SQLite cannot create the tables.
    pub fn in_memory() -> Result<Self, StoreError> {
        let error = |source| StoreError::Open {
            path: PathBuf::from(":memory:"),
            source,
        };
        Self::set_up(Connection::open_in_memory().map_err(error)?).map_err(error)
    }

    fn set_up(connection: Connection) -> Result<Self, rusqlite::Error> {
        for statement in SCHEMA {
            connection.execute_batch(statement)?;
        }
        Ok(Self {
            connection: Arc::new(Mutex::new(connection)),
            readers: None,
        })
    }

    /// Runs `read` on a read-only connection of its own, so that it does not wait
    /// behind a write on the shared connection (in WAL mode readers see the last
    /// commit while a write goes on), or on the shared one for a database in memory
    /// or should another connection fail to open.
    pub fn read<T>(&self, read: impl FnOnce(&Connection) -> T) -> T {
        let Some(readers) = &self.readers else {
            return read(&self.lock());
        };
        let idle = readers.idle().pop();
        let Some(connection) = idle.or_else(|| readers.open().ok()) else {
            return read(&self.lock());
        };
        let result = read(&connection);
        readers.idle().push(connection);
        result
    }

    /// The connection, for one statement or transaction.
    pub fn lock(&self) -> MutexGuard<'_, Connection> {
        // SQLite rolls back a transaction left open by a panic when the next one
        // begins, so a poisoned lock still guards a consistent database.
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }
}
