//! One step invocation: a fresh instance, its input regions handed in, its output
//! regions taken back and checked, retried per the step's policy.

use super::{RunError, StepFailure};
use crate::engine::PoolWait;
use crate::failure::{Failure, classify, cut_guest_text};
use crate::fair::FirstPoll;
use crate::function::{Entry, LoadedFunction};
use crate::host::{MessageInfo, StepContext};
use crate::region::{Region, RegionScope};
use crate::run::chain::RunShared;
use crate::state::{LineOwner, RunLabel};
use faas_invoke::{LogLevel, StepRecord};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Where a step invocation sits in its run.
pub(crate) struct Position<'a> {
    pub step: &'a str,
    pub branch: u32,
    pub branches: u32,
}

/// Runs `position.step` on `inputs`, retrying per its policy.
///
/// # Errors
/// [`RunError::StepFailed`] when the last allowed attempt fails.
pub(crate) async fn run_step(
    run: &RunShared,
    position: Position<'_>,
    inputs: Vec<Region>,
) -> Result<Vec<Region>, RunError> {
    let manifest = run.workflow.manifest();
    let step = &manifest.steps[position.step];
    let function = run
        .workflow
        .function(&step.function)
        .expect("the manifest's validation ties every step to a loaded function");
    let expected = step.output.to_string();
    let attempts = step.retry.attempts.max(1);
    let mut backoff = Duration::from_millis(step.retry.backoff_ms);
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let context = StepContext {
            tenant: run.workflow.tenant().to_owned(),
            workflow: run.workflow.name().to_owned(),
            run_id: run.run_id.clone(),
            step: position.step.to_owned(),
            attempt,
            branch: position.branch,
            branches: position.branches,
            message: run.message.as_ref().map(|message| MessageInfo {
                source: message.source.clone(),
                id: message.id.clone(),
                delivery_count: message.delivery_count,
            }),
        };
        let span = tracing::info_span!(
            "step",
            run_id = %run.run_id,
            workflow = run.workflow.name(),
            step = position.step,
            branch = position.branch,
            attempt
        );
        let result = {
            let _permit = run.concurrency.acquire().await.expect("never closed");
            attempt_once(
                run,
                function,
                context,
                inputs.clone(),
                &expected,
                &step.memories,
            )
            .instrument(span)
            .await
        };
        let record = |error: Option<String>| StepRecord {
            step: position.step.to_owned(),
            branch: position.branch,
            attempts: attempt,
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
            succeeded: error.is_none(),
            error,
            worker: None,
            handoff: None,
        };
        match result {
            Ok(outputs) => {
                run.recorder.push(record(None));
                return Ok(outputs);
            }
            Err(cause) if attempt < attempts => {
                log_failure(
                    run,
                    &step.function,
                    position.step,
                    LogLevel::Warn,
                    format!("attempt {attempt} of {attempts} failed, retrying: {cause}"),
                );
                tracing::warn!(
                    step = position.step,
                    branch = position.branch,
                    attempt,
                    cause = ?faas_invoke::log_excerpt(&cause.to_string()),
                    "step failed, retrying in {}ms",
                    backoff.as_millis()
                );
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2);
            }
            Err(cause) => {
                log_failure(
                    run,
                    &step.function,
                    position.step,
                    LogLevel::Error,
                    format!("attempt {attempt} of {attempts} failed: {cause}"),
                );
                run.recorder.push(record(Some(cause.to_string())));
                return Err(RunError::StepFailed {
                    step: position.step.to_owned(),
                    branch: position.branch,
                    attempts: attempt,
                    cause,
                });
            }
        }
    }
}

/// Leaves `why` in the run's workflow's logs as a line of `step` (run by `function`).
fn log_failure(run: &RunShared, function: &str, step: &str, level: LogLevel, why: String) {
    let label = RunLabel {
        run: run.run_id.clone(),
        step: step.to_owned(),
    };
    let owner = LineOwner {
        tenant: run.workflow.tenant(),
        workflow: run.workflow.name(),
        function,
        run: Some(&label),
    };
    run.worker.log_failure(owner, level, why);
}

/// One attempt: a fresh store and instance, gone when this returns.
async fn attempt_once(
    run: &RunShared,
    function: &LoadedFunction,
    context: StepContext,
    inputs: Vec<Region>,
    expected_output: &str,
    memories: &faas_workflow::StepMemories,
) -> Result<Vec<Region>, StepFailure> {
    let entry = function.entry();
    let Entry::Step(pre) = &*entry else {
        return Err(StepFailure::Returned(format!(
            "function `{}` is not a step function",
            function.name()
        )));
    };
    let invoke = |err| StepFailure::Invoke(Arc::new(err));
    let scope = RegionScope::step(
        run.owner.clone(),
        run.worker.config().region_map_threshold,
        run.worker.region_limits(),
        memories,
    );
    // Also checked on the way out: a value copied with `from-bytes` has no capacity to
    // check when it is made.
    let output_rule = scope.output.clone();
    let (mut store, output) = run
        .worker
        .new_store(&run.workflow, function, &entry, Some(scope))
        .await
        .map_err(invoke)?;
    store.data_mut().event.run = Some(RunLabel {
        run: context.run_id.clone(),
        step: context.step.clone(),
    });
    let mut handles = Vec::with_capacity(inputs.len());
    for region in inputs {
        region
            .check_owner(&run.owner)
            .map_err(|err| StepFailure::Region(Arc::new(err)))?;
        let handle = store.data_mut().table.push(region).map_err(|err| {
            StepFailure::Returned(format!("cannot hand over an input region: {err}"))
        })?;
        handles.push(handle);
    }
    let pre = pre.clone();
    let expected = expected_output.to_owned();
    let guest = async move {
        let called = async {
            let mut pool = PoolWait::default();
            let instance = loop {
                let made = pre.instantiate_async(&mut store).await;
                if !pool.again(&made).await {
                    break made.map_err(Failure::Instantiate)?;
                }
            };
            instance
                .faas_platform_handler()
                .call_handle(&mut store, &context, &handles)
                .await
                .map_err(Failure::Run)
        }
        .await;
        let outputs = match called {
            Err(failure) => Err(Ended::Failed(failure)),
            Ok(Err(message)) => Err(Ended::Step(StepFailure::Returned(cut_guest_text(message)))),
            Ok(Ok(returned)) => {
                take_outputs(&mut store, returned, &expected, &output_rule).map_err(Ended::Step)
            }
        };
        // A small instance none of whose pages back a value is torn down here, in its
        // own task, as an HTTP function's is: putting that off to a blocking thread
        // cost a thread wake-up per step (bench/sensor-replay.sh). Others are put off
        // (below), unless the step failed: no consumer waits for it then, and what it
        // holds (region memory files, an instance slot) must be free again before the
        // run answers, or the next event could be refused for an event that is over.
        let backs_a_value = outputs
            .as_ref()
            .is_ok_and(|outputs| outputs.iter().any(Region::is_mappable));
        let put_off = outputs.is_ok() && (backs_a_value || !store.data().quick_to_tear_down());
        let mapped = backs_a_value || !store.data().regions.mapped.is_empty();
        (put_off.then_some(store), outputs, mapped)
    };
    let task = run.worker.spawn_guest(
        run.workflow.tenant.clone(),
        function,
        FirstPoll::OnGuestThreads,
        guest,
        |(_, _, mapped)| *mapped,
    );
    let timed_out = || {
        invoke(crate::InvokeError::Timeout {
            function: function.name().to_owned(),
            timeout: function.limits.timeout,
        })
    };
    // Dropped with its run (past the run's deadline, or its caller gone), the step's
    // instance goes too, its slot free at once rather than at the step's own deadline.
    let (put_off, outputs, _) = match task.stopped_if_dropped().await {
        Ok(Some(finished)) => finished,
        Ok(None) => return Err(timed_out()),
        Err(join) => {
            return Err(StepFailure::Returned(format!(
                "the instance's task failed: {join}"
            )));
        }
    };
    // Tearing an instance down (unmapping its region pages, resetting its slot) takes
    // time that grows with its memory; the next step need not wait for it, and should
    // map or copy what it takes before the teardown competes with it for the
    // memory-map lock and the cores. `bench/regions.sh --sweep` measured that putting
    // the teardown off for copied values too is what makes copying the faster handoff
    // below the map threshold.
    let producer = put_off.map(|store| run.worker.retire(store));
    let mut outputs = outputs.map_err(|ended| match ended {
        Ended::Failed(failure) => invoke(classify(function, failure, &output)),
        Ended::Step(failure) => failure,
    })?;
    for region in outputs.iter_mut().filter(|region| region.is_mappable()) {
        let producer = producer
            .as_ref()
            .expect("a store backing a value is put off");
        region.retain_producer(producer.clone());
    }
    Ok(outputs)
}

/// How a step's guest task ended, when not with its outputs.
enum Ended {
    /// The instance failed (trap, limit); classified with its output afterwards.
    Failed(Failure),
    /// The guest returned an error or regions the step may not hand on.
    Step(StepFailure),
}

/// Takes the regions a step returned out of its store, checks each against the step's
/// declared output type and size, and fixes it for its consumers.
fn take_outputs(
    store: &mut wasmtime::Store<crate::state::InstanceState>,
    returned: Vec<wasmtime::component::Resource<Region>>,
    expected_output: &str,
    output_rule: &crate::region::MemoryRule,
) -> Result<Vec<Region>, StepFailure> {
    let mut outputs = Vec::with_capacity(returned.len());
    for handle in returned {
        let mut region = store.data_mut().table.delete(handle).map_err(|err| {
            StepFailure::Returned(format!("returned an invalid region handle: {err}"))
        })?;
        if region.schema_type() != expected_output {
            return Err(StepFailure::WrongOutputType {
                expected: expected_output.to_owned(),
                found: cut_guest_text(region.schema_type().to_owned()),
            });
        }
        // The producer has returned, so the value can be fixed for its consumers.
        if let Err(err) = region
            .hand_over()
            .and_then(|()| output_rule.check("output region", region.len()))
        {
            return Err(StepFailure::Region(Arc::new(err)));
        }
        // The producer's store may go before the value does.
        region.carry_claim(&mut store.data_mut().limiter.claim);
        outputs.push(region);
    }
    Ok(outputs)
}
