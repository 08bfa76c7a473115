//! The deployments of embedded mode, saved so that `faas up` serves them again after a
//! restart.
//!
//! A deployment is saved as what was uploaded (file name, manifest text, schemas and
//! component bytes) plus the revision and time it got, so that deploying it again
//! rebuilds the same version. Components are stored once per SHA-256 of their bytes,
//! however many deployments name them, and deleted with the last one that does. Each
//! save and each removal is one transaction: a process killed at any moment leaves the
//! previous version or the new one, whole.

use crate::db::{Database, StoreError};
use faas_invoke::{Component, Components};
use rusqlite::blob::ZeroBlob;
use rusqlite::{MAIN_DB, Transaction, TransactionBehavior, params};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The deployments' tables. A deployment is keyed by workflow name, which is unique
/// across tenants; its schemas and its functions' components hang off it.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS deployments (
    name TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    file_name TEXT NOT NULL,
    manifest TEXT NOT NULL,
    revision INTEGER NOT NULL,
    deployed_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS deployment_schemas (
    deployment TEXT NOT NULL,
    file_name TEXT NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (deployment, file_name)
);
CREATE TABLE IF NOT EXISTS deployment_components (
    deployment TEXT NOT NULL,
    function TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    PRIMARY KEY (deployment, function)
);
CREATE TABLE IF NOT EXISTS components (
    sha256 TEXT PRIMARY KEY,
    bytes BLOB NOT NULL
);
";

/// One deployment as saved: what is needed to deploy the same version again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedDeployment {
    /// The workflow's name.
    pub name: String,
    /// The tenant it belongs to.
    pub tenant: String,
    /// The manifest's file name, as uploaded (used in error messages).
    pub file_name: String,
    /// The workflow.toml text.
    pub manifest: String,
    /// Karmem `.km` texts by file name as written in the manifest.
    pub schemas: BTreeMap<String, String>,
    /// Component bytes by function name.
    pub components: Arc<Components>,
    /// The revision this version was given.
    pub revision: u64,
    /// When this version was deployed (kept to the millisecond).
    pub deployed_at: SystemTime,
}

/// The saved deployments in a [`Database`]; clones share the database.
#[derive(Clone)]
pub struct DeploymentStore {
    database: Database,
}

impl DeploymentStore {
    /// The deployments saved in `database`.
    pub fn new(database: Database) -> Self {
        Self { database }
    }

    /// Saves `deployment`, replacing the saved version of the same name, in one
    /// transaction; components no deployment names any more are deleted with it.
    ///
    /// # Errors
    /// [`StoreError::Sql`] naming the workflow; nothing changed then.
    pub fn save(&self, deployment: &SavedDeployment) -> Result<(), StoreError> {
        let doing = format!("saving workflow `{}`", deployment.name);
        self.write(&doing, |tx| {
            unlink(tx, &deployment.name)?;
            tx.execute(
                "INSERT INTO deployments
                     (name, tenant, file_name, manifest, revision, deployed_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (name) DO UPDATE SET
                     tenant = excluded.tenant, file_name = excluded.file_name,
                     manifest = excluded.manifest, revision = excluded.revision,
                     deployed_at_ms = excluded.deployed_at_ms",
                params![
                    deployment.name,
                    deployment.tenant,
                    deployment.file_name,
                    deployment.manifest,
                    deployment.revision,
                    unix_ms(deployment.deployed_at),
                ],
            )?;
            for (file_name, text) in &deployment.schemas {
                tx.execute(
                    "INSERT INTO deployment_schemas (deployment, file_name, text)
                     VALUES (?1, ?2, ?3)",
                    params![deployment.name, file_name, text],
                )?;
            }
            for (function, component) in deployment.components.iter() {
                let sha256 = component.digest();
                insert_component(tx, sha256, component)?;
                tx.execute(
                    "INSERT INTO deployment_components (deployment, function, sha256)
                     VALUES (?1, ?2, ?3)",
                    params![deployment.name, function, sha256],
                )?;
            }
            prune_components(tx)
        })
    }

    /// Deletes the saved deployment `name`, and the components only it named, in one
    /// transaction. Returns whether there was one.
    ///
    /// # Errors
    /// [`StoreError::Sql`] naming the workflow; nothing changed then.
    pub fn remove(&self, name: &str) -> Result<bool, StoreError> {
        self.write(&format!("removing workflow `{name}`"), |tx| {
            unlink(tx, name)?;
            let removed = tx.execute("DELETE FROM deployments WHERE name = ?1", params![name])?;
            prune_components(tx)?;
            Ok(removed > 0)
        })
    }

    /// Every saved deployment, by name.
    ///
    /// # Errors
    /// [`StoreError::Sql`] if the tables cannot be read.
    pub fn load_all(&self) -> Result<Vec<SavedDeployment>, StoreError> {
        let mut connection = self.database.lock();
        // One read transaction, so a writer in another process cannot show us half of
        // its change between the statements below.
        let tx = connection
            .transaction()
            .map_err(StoreError::sql("reading the saved deployments"))?;
        read_all(&tx).map_err(StoreError::sql("reading the saved deployments"))
    }

    /// Runs `change` in one immediate transaction, committed only if it succeeds.
    fn write<T>(
        &self,
        doing: &str,
        change: impl FnOnce(&Transaction<'_>) -> Result<T, rusqlite::Error>,
    ) -> Result<T, StoreError> {
        let mut connection = self.database.lock();
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::sql(doing))?;
        // On an error the transaction is dropped here, which rolls it back.
        let result = change(&tx).map_err(StoreError::sql(doing))?;
        tx.commit().map_err(StoreError::sql(doing))?;
        Ok(result)
    }
}

/// Deletes the schemas and component references of deployment `name`.
fn unlink(tx: &Transaction<'_>, name: &str) -> Result<(), rusqlite::Error> {
    tx.execute(
        "DELETE FROM deployment_schemas WHERE deployment = ?1",
        params![name],
    )?;
    tx.execute(
        "DELETE FROM deployment_components WHERE deployment = ?1",
        params![name],
    )?;
    Ok(())
}

/// Deletes the components that no deployment names.
fn prune_components(tx: &Transaction<'_>) -> Result<(), rusqlite::Error> {
    tx.execute(
        "DELETE FROM components
         WHERE sha256 NOT IN (SELECT sha256 FROM deployment_components)",
        [],
    )?;
    Ok(())
}

fn read_all(tx: &Transaction<'_>) -> Result<Vec<SavedDeployment>, rusqlite::Error> {
    let mut deployments: BTreeMap<String, SavedDeployment> = BTreeMap::new();
    let mut rows = tx.prepare(
        "SELECT name, tenant, file_name, manifest, revision, deployed_at_ms FROM deployments",
    )?;
    let saved = rows.query_map([], |row| {
        Ok(SavedDeployment {
            name: row.get(0)?,
            tenant: row.get(1)?,
            file_name: row.get(2)?,
            manifest: row.get(3)?,
            schemas: BTreeMap::new(),
            components: Arc::default(),
            revision: row.get(4)?,
            deployed_at: SystemTime::UNIX_EPOCH + Duration::from_millis(row.get(5)?),
        })
    })?;
    for deployment in saved {
        let deployment = deployment?;
        deployments.insert(deployment.name.clone(), deployment);
    }
    let mut schemas = tx.prepare("SELECT deployment, file_name, text FROM deployment_schemas")?;
    let mut rows = schemas.query([])?;
    while let Some(row) = rows.next()? {
        let name: String = row.get(0)?;
        if let Some(deployment) = deployments.get_mut(&name) {
            deployment.schemas.insert(row.get(1)?, row.get(2)?);
        }
    }
    // Each component is read once, however many deployments name it, and they share
    // that one copy.
    let mut stored: HashMap<String, Component> = HashMap::new();
    let mut statement = tx.prepare("SELECT rowid, sha256, length(bytes) FROM components")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let bytes = read_component(tx, row.get(0)?, row.get(2)?)?;
        stored.insert(row.get(1)?, Component::new(bytes));
    }
    let mut components: BTreeMap<String, Components> = BTreeMap::new();
    let mut statement =
        tx.prepare("SELECT deployment, function, sha256 FROM deployment_components")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let sha256: String = row.get(2)?;
        // Each save and removal is one transaction, so a named component is stored.
        if let Some(component) = stored.get(&sha256) {
            components
                .entry(row.get(0)?)
                .or_default()
                .insert(row.get(1)?, component.clone());
        }
    }
    for (name, functions) in components {
        if let Some(deployment) = deployments.get_mut(&name) {
            deployment.components = Arc::new(functions);
        }
    }
    Ok(deployments.into_values().collect())
}

// Components go in and out through SQLite's incremental blob I/O. Bound as a
// parameter, SQLite copies a blob before it writes it, and keeps the pages it wrote in
// memory until the transaction ends (130 MiB over a 64 MiB component); read as a
// column, it assembles the whole blob before it is copied out. Written into a
// `zeroblob` and read into a buffer of its length, a component costs one copy.

/// Stores `component` under `sha256`, unless a component of that digest is stored.
fn insert_component(tx: &Transaction, sha256: &str, component: &[u8]) -> rusqlite::Result<()> {
    let inserted = tx.execute(
        "INSERT OR IGNORE INTO components (sha256, bytes) VALUES (?1, ?2)",
        params![sha256, ZeroBlob(component.len() as u64)],
    )?;
    if inserted == 1 {
        let mut blob = tx.blob_open(
            MAIN_DB,
            "components",
            "bytes",
            tx.last_insert_rowid(),
            false,
        )?;
        blob.write_at(component, 0)?;
    }
    Ok(())
}

/// The component stored at `rowid`, of `len` bytes.
fn read_component(tx: &Transaction, rowid: i64, len: usize) -> rusqlite::Result<Vec<u8>> {
    let blob = tx.blob_open(MAIN_DB, "components", "bytes", rowid, true)?;
    let mut bytes = vec![0; len];
    blob.read_at_exact(&mut bytes, 0)?;
    Ok(bytes)
}

/// `time` in milliseconds since the Unix epoch (0 for a time before it).
fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis().try_into().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(name: &str, revision: u64, component: &[u8]) -> SavedDeployment {
        SavedDeployment {
            name: name.to_owned(),
            tenant: "acme".to_owned(),
            file_name: format!("{name}/workflow.toml"),
            manifest: format!("name = \"{name}\"\n# revision {revision}\n"),
            schemas: BTreeMap::from([("types.km".to_owned(), format!("// {revision}"))]),
            components: Arc::new(BTreeMap::from([
                ("main".to_owned(), Component::new(component.to_vec())),
                (
                    "shared".to_owned(),
                    Component::new(b"the same bytes".to_vec()),
                ),
            ])),
            revision,
            deployed_at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        }
    }

    fn count(store: &DeploymentStore, table: &str) -> i64 {
        store
            .database
            .lock()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .unwrap()
    }

    #[test]
    fn a_saved_deployment_reads_back_whole_and_replaces_its_previous_version() {
        let store = DeploymentStore::new(Database::in_memory().unwrap());
        store.save(&deployment("a", 1, b"a1")).unwrap();
        store.save(&deployment("b", 2, b"b2")).unwrap();
        let newer = deployment("a", 3, b"a3");
        store.save(&newer).unwrap();
        let loaded = store.load_all().unwrap();
        assert_eq!(loaded, [newer, deployment("b", 2, b"b2")]);
        // `shared` is stored once for both; `a1` went with the version that named it.
        assert_eq!(count(&store, "components"), 3);
    }

    #[test]
    fn a_removal_deletes_the_deployment_and_the_components_only_it_named() {
        let store = DeploymentStore::new(Database::in_memory().unwrap());
        store.save(&deployment("a", 1, b"a1")).unwrap();
        store.save(&deployment("b", 2, b"b2")).unwrap();
        assert!(store.remove("a").unwrap());
        assert!(!store.remove("a").unwrap());
        assert_eq!(store.load_all().unwrap(), [deployment("b", 2, b"b2")]);
        assert_eq!(count(&store, "components"), 2);
        assert_eq!(count(&store, "deployment_schemas"), 1);
        assert!(store.remove("b").unwrap());
        for table in [
            "deployments",
            "deployment_schemas",
            "deployment_components",
            "components",
        ] {
            assert_eq!(count(&store, table), 0, "{table}");
        }
    }

    #[test]
    fn a_save_that_fails_half_way_leaves_the_previous_version_whole() {
        let store = DeploymentStore::new(Database::in_memory().unwrap());
        let previous = deployment("a", 1, b"a1");
        store.save(&previous).unwrap();
        // Make the save fail after the deployment row and the schemas are written, as
        // a process killed there would stop: at its first component reference.
        store
            .database
            .lock()
            .execute_batch(
                "CREATE TEMP TRIGGER fail BEFORE INSERT ON deployment_components
                 BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
            )
            .unwrap();
        let error = store.save(&deployment("a", 2, b"a2")).unwrap_err();
        assert!(error.to_string().contains("saving workflow `a`"), "{error}");
        assert!(error.to_string().contains("injected failure"), "{error}");
        // And a removal that fails at its last statement (pruning the components).
        store
            .database
            .lock()
            .execute_batch(
                "DROP TRIGGER fail;
                 CREATE TEMP TRIGGER fail BEFORE DELETE ON components
                 BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
            )
            .unwrap();
        let error = store.remove("a").unwrap_err();
        assert!(
            error.to_string().contains("removing workflow `a`"),
            "{error}"
        );
        store
            .database
            .lock()
            .execute_batch("DROP TRIGGER fail")
            .unwrap();
        // Nothing of the failed save is left: the same rows as before it.
        assert_eq!(store.load_all().unwrap(), [previous]);
        assert_eq!(count(&store, "components"), 2);
        assert_eq!(count(&store, "deployment_components"), 2);
        assert_eq!(count(&store, "deployment_schemas"), 1);
    }

    #[test]
    fn saved_deployments_outlive_the_process_that_saved_them() {
        let dir = tempfile::tempdir().unwrap();
        let saved = deployment("a", 7, b"a7");
        DeploymentStore::new(Database::open(dir.path()).unwrap())
            .save(&saved)
            .unwrap();
        let reopened = DeploymentStore::new(Database::open(dir.path()).unwrap());
        assert_eq!(reopened.load_all().unwrap(), [saved]);
    }
}
