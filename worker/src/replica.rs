//! The worker as the gateway's own (embedded mode): [`Worker`] implements
//! `faas_invoke::LocalWorker`, and a workflow loaded on it is a [`LocalReplica`], an
//! `faas_invoke::Invoke` that the gateway's registry holds like any other replica.

use crate::function::LoadedWorkflow;
use crate::run::RunError;
use crate::worker::Worker;
use bytes::Bytes;
use faas_invoke::{
    BoxFuture, Components, EventFailure, HttpResponse, Invoke, LoadError, Loaded, LocalWorker,
    OutputRegion, RunReply, TriggerMessage, WorkerQuotas,
};
use faas_store::Quotas;
use faas_workflow::Workflow;
use http_body_util::Full;
use std::sync::Arc;

/// A workflow loaded on a worker in this process: events are direct calls.
pub struct LocalReplica {
    worker: Arc<Worker>,
    loaded: Arc<LoadedWorkflow>,
}

impl LocalReplica {
    /// `loaded`, as loaded on `worker`, as a replica.
    pub fn new(worker: Arc<Worker>, loaded: Arc<LoadedWorkflow>) -> Self {
        Self { worker, loaded }
    }
}

impl Invoke for LocalReplica {
    fn call_function<'a>(
        &'a self,
        _workflow: &'a str,
        function: &'a str,
        request: http::Request<Bytes>,
    ) -> BoxFuture<'a, Result<HttpResponse, EventFailure>> {
        Box::pin(async move {
            self.worker
                .handle_http(&self.loaded, function, request.map(Full::new))
                .await
                .map_err(|err| EventFailure::from(&err))
        })
    }

    fn run<'a>(
        &'a self,
        _workflow: &'a str,
        payload: Bytes,
        message: Option<TriggerMessage>,
        // Its output is in this process already, counted in its tenant's guest memory.
        _room: &'a mut dyn faas_invoke::ReplyRoom,
    ) -> BoxFuture<'a, RunReply> {
        Box::pin(async move {
            let input = self.loaded.entry_input(payload);
            let outcome = match message {
                Some(message) => {
                    self.worker
                        .run_workflow_for_message(&self.loaded, input, message)
                        .await
                }
                None => self.worker.run_workflow(&self.loaded, input).await,
            };
            let result = outcome.result.and_then(|regions| {
                regions
                    .iter()
                    .map(|region| {
                        let bytes = region
                            .bytes()
                            .map_err(|err| RunError::Output(err.to_string()))?;
                        Ok(OutputRegion {
                            schema_type: region.schema_type().to_owned(),
                            bytes: Bytes::from(bytes.into_owned()),
                        })
                    })
                    .collect()
            });
            RunReply {
                record: Some(outcome.record),
                result: result.map_err(|err| EventFailure::from(&err)),
            }
        })
    }

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        Some(self.worker.guest_threads().clone())
    }
}

/// The worker's quotas for a tenant from the contract's [`WorkerQuotas`].
fn quotas_of(quotas: &WorkerQuotas) -> Quotas {
    Quotas {
        max_instances: quotas.max_instances,
        kv_max_keys: quotas.kv_max_keys,
        kv_max_bytes: quotas.kv_max_bytes,
        guest_memory_mb: quotas.guest_memory_mb,
        ..Quotas::default()
    }
}

impl LocalWorker for Worker {
    fn load<'a>(
        self: Arc<Self>,
        workflow: &'a Workflow,
        components: Components,
    ) -> BoxFuture<'a, Result<Loaded, LoadError>> {
        Box::pin(async move {
            let loaded = Arc::new(self.load_workflow(workflow, components).await?);
            let functions = loaded.summaries();
            Ok(Loaded {
                replica: Arc::new(LocalReplica::new(self, loaded)),
                functions,
            })
        })
    }

    fn compile_ahead<'a>(
        self: Arc<Self>,
        workflow: &'a Workflow,
        components: &'a Components,
    ) -> BoxFuture<'a, Result<(), LoadError>> {
        Box::pin(async move { Worker::compile_ahead(&self, workflow, components).await })
    }

    fn active_instances(&self) -> usize {
        Worker::active_instances(self)
    }

    fn set_tenant_quotas(&self, tenant: &str, quotas: &WorkerQuotas) {
        Worker::set_tenant_quotas(self, tenant, &quotas_of(quotas));
    }

    fn apply_tenant_quotas(&self, tenants: &[(String, WorkerQuotas)]) {
        self.apply_quotas(
            tenants
                .iter()
                .map(|(name, quotas)| (name.as_str(), quotas_of(quotas))),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WorkerConfig;

    // A pub/sub message's run is driven from the runtime its replica names (the
    // gateway's `message_runtime`): an in-process replica names the worker's guest
    // threads, where the run's steps run.
    #[tokio::test]
    async fn an_in_process_replica_names_the_guest_threads_as_its_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let worker = Arc::new(Worker::new(WorkerConfig::new(dir.path())).unwrap());
        let text = format!(
            "name = \"hello\"\ntenant = \"t\"\n[functions.hello]\ncomponent = \"{}\"\n\
             [[triggers.http]]\nroute = \"/hello\"\nfunction = \"hello\"\n",
            faas_testing::component_path("hello").display()
        );
        let manifest = Workflow::parse("workflow.toml", &text).unwrap();
        let components = std::collections::BTreeMap::from([(
            "hello".to_owned(),
            faas_invoke::Component::new(faas_testing::component("hello")),
        )]);
        let loaded = worker.load(&manifest, components).await.unwrap();
        let runtime = loaded.replica.runtime().expect("an in-process replica");
        let thread = runtime
            .spawn(async { std::thread::current().name().map(str::to_owned) })
            .await
            .unwrap();
        assert_eq!(thread.as_deref(), Some("faas-guest"));
    }
}
