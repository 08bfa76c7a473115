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
    /// The file's permissions could not be made owner-only, or it is a symbolic link.
    #[error("securing the state database {path}: {source}")]
    File {
        /// The database file, or its `-wal` or `-shm` file.
        path: PathBuf,
        /// The file system's error.
        source: std::io::Error,
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
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | NO_LINK;
        let connection = Connection::open_with_flags(&self.path, flags)?;
        connection.busy_timeout(BUSY_TIMEOUT)?;
        Ok(connection)
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every connection refuses a database file that is a symbolic link: it would put the
/// tenants' data wherever the link points.
const NO_LINK: OpenFlags = OpenFlags::SQLITE_OPEN_NOFOLLOW;

/// Makes the database file at `path` owner-only before SQLite opens it: created so
/// when missing (SQLite would give it the umask's mode, 0644 by default, and gives the
/// `-wal` and `-shm` files it creates the mode of the database file), narrowed with
/// those files when an older version left them readable by others.
fn restrict_files(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let error = |path: &Path| {
        let path = path.to_owned();
        move |source| StoreError::File { path, source }
    };
    // `create_new` follows no link: a link at `path` is AlreadyExists, refused below.
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(_) => return Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(error(path)(err)),
    }
    let beside = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    for file in [path.to_owned(), beside("-wal"), beside("-shm")] {
        let metadata = match std::fs::symlink_metadata(&file) {
            Ok(metadata) => metadata,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(error(&file)(err)),
        };
        if metadata.file_type().is_symlink() {
            return Err(error(&file)(std::io::Error::other(
                "it is a symbolic link; remove it",
            )));
        }
        if metadata.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
                .map_err(error(&file))?;
        }
    }
    Ok(())
}

/// How long a statement waits for a lock another process (or connection) holds.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Database {
    /// Opens (or creates) `<dir>/faas.db` and its tables. The file and its `-wal` and
    /// `-shm` files are owner-only (0600): they hold every tenant's key-value data,
    /// manifests and components.
    ///
    /// # Errors
    /// [`StoreError::Open`] naming the file; [`StoreError::File`] if it is a symbolic
    /// link or its permissions cannot be narrowed.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join(FILE_NAME);
        restrict_files(&path)?;
        let error = |source| StoreError::Open {
            path: path.clone(),
            source,
        };
        let connection =
            Connection::open_with_flags(&path, OpenFlags::default() | NO_LINK).map_err(error)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_database_and_its_journal_are_readable_by_their_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).unwrap();
        database
            .lock()
            .execute_batch("CREATE TABLE probe (x); INSERT INTO probe VALUES (1);")
            .unwrap();
        assert_eq!(format!("{:o}", mode(&dir.path().join(FILE_NAME))), "600");
        let wal = dir.path().join(format!("{FILE_NAME}-wal"));
        assert!(wal.exists(), "WAL mode keeps a -wal file while open");
        assert_eq!(format!("{:o}", mode(&wal)), "600");
        assert_eq!(
            format!("{:o}", mode(&dir.path().join(format!("{FILE_NAME}-shm")))),
            "600"
        );
    }

    #[test]
    fn a_database_an_older_version_left_readable_by_others_is_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        drop(Database::open(dir.path()).unwrap());
        let path = dir.path().join(FILE_NAME);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(Database::open(dir.path()).unwrap());
        assert_eq!(format!("{:o}", mode(&path)), "600");
    }

    #[test]
    fn a_database_file_that_is_a_symbolic_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere.db");
        std::os::unix::fs::symlink(&elsewhere, dir.path().join(FILE_NAME)).unwrap();
        let error = Database::open(dir.path()).err().expect("a link is refused");
        assert!(matches!(error, StoreError::File { .. }), "{error}");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(!elsewhere.exists(), "nothing was created through the link");
    }
}
