//! Walking a workflow's chain of steps: sequences, fan-outs and joins.

use super::record::Recorder;
use super::spread::{BranchCall, BranchPeer, Peers};
use super::step::{Position, run_step};
use super::{RunError, RunOutcome};
use crate::fair::AbortOnDrop;
use crate::function::LoadedWorkflow;
use crate::region::{Region, RegionOwner};
use crate::worker::Worker;
use faas_invoke::TriggerMessage;
use faas_invoke::{RunRecord, RunStatus, StepRecord};
use faas_workflow::{Edge, EdgeMode, FanOut, JoinPolicy, OnFailure};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::Instrument as _;

/// What every step of one run shares.
pub(crate) struct RunShared {
    pub worker: Arc<Worker>,
    pub workflow: Arc<LoadedWorkflow>,
    pub run_id: String,
    /// The owner of every region this run's steps create.
    pub owner: RegionOwner,
    /// The message that started the run, if a Redis trigger did.
    pub message: Option<TriggerMessage>,
    pub recorder: Recorder,
    /// Bounds how many step instances of this run exist at once.
    pub concurrency: Semaphore,
    /// Other workers holding this workflow, which run some fan-out branches when the
    /// workflow spreads them (services mode); empty otherwise.
    pub peers: Peers,
    /// When the run's deadline passes: a branch sent to a peer must end by then too.
    pub deadline: Instant,
}

impl RunShared {
    fn new(
        worker: Arc<Worker>,
        workflow: Arc<LoadedWorkflow>,
        run_id: String,
        message: Option<TriggerMessage>,
        peers: Peers,
        timeout: Duration,
    ) -> Arc<Self> {
        let settings = workflow.manifest().settings;
        Arc::new(Self {
            deadline: Instant::now() + timeout,
            worker,
            owner: RegionOwner {
                tenant: workflow.tenant.clone(),
                workflow: workflow.name.clone(),
                run_id: run_id.as_str().into(),
            },
            run_id,
            message,
            recorder: Recorder::default(),
            concurrency: Semaphore::new(settings.concurrency.max(1) as usize),
            workflow,
            peers,
        })
    }
}

/// Runs the whole workflow under its run deadline and records what happened.
pub(crate) async fn run(
    worker: Arc<Worker>,
    workflow: Arc<LoadedWorkflow>,
    input: Region,
    message: Option<TriggerMessage>,
    peers: Peers,
) -> RunOutcome {
    let settings = workflow.manifest().settings;
    let deadline = Duration::from_millis(settings.timeout_ms);
    let run = RunShared::new(worker, workflow, new_run_id(), message, peers, deadline);
    let started_at = SystemTime::now();
    let clock = Instant::now();
    let span = tracing::info_span!(
        "run",
        run_id = %run.run_id,
        workflow = run.workflow.name(),
        tenant = run.workflow.tenant(),
        message = run.message.as_ref().map(|message| message.source.as_str()),
    );
    let result = match tokio::time::timeout(deadline, execute_on_guest_threads(&run, input))
        .instrument(span)
        .await
    {
        Ok(result) => result,
        Err(_) => Err(RunError::Timeout(deadline)),
    };
    let recorded = run.recorder.take();
    let record = RunRecord {
        run_id: run.run_id.clone(),
        workflow: run.workflow.name().to_owned(),
        started_at_ms: started_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64),
        duration_ms: clock.elapsed().as_secs_f64() * 1e3,
        status: if result.is_ok() {
            RunStatus::Succeeded
        } else {
            RunStatus::Failed
        },
        error: result.as_ref().err().map(ToString::to_string),
        steps: recorded.steps,
        omitted_steps: recorded.omitted,
    };
    RunOutcome { record, result }
}

/// Runs [`execute`] on the worker's guest threads, where its steps run, and gives its
/// result; dropping this future stops it there (at the run's deadline, say). Handing a
/// step to a guest thread and its output back is then a task switch on one thread, not
/// a wake-up of another: as one workflow, the sensor pipeline's platform CPU time per
/// match fell by 11-17% (bench/HISTORY.md, "Sensor pipeline").
async fn execute_on_guest_threads(
    run: &Arc<RunShared>,
    input: Region,
) -> Result<Vec<Region>, RunError> {
    let shared = run.clone();
    let task = run
        .worker
        .guest_threads()
        .spawn(async move { execute(&shared, input).await }.in_current_span());
    match AbortOnDrop(task).await {
        Ok(result) => result,
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        // Only the guest threads' runtime shutting down cancels the task otherwise.
        Err(_) => Err(RunError::WorkerStopped),
    }
}

async fn execute(run: &Arc<RunShared>, input: Region) -> Result<Vec<Region>, RunError> {
    let manifest = run.workflow.manifest();
    let chain = &run.workflow.chain;
    if chain.is_empty() {
        return Err(RunError::NoSteps(run.workflow.name().to_owned()));
    }
    let mut current = vec![input];
    let mut index = 0;
    while index < chain.len() {
        let (step, edge) = &chain[index];
        if let Some(Edge {
            mode: EdgeMode::FanOut(fan_out),
            ..
        }) = edge
        {
            // The segment runs from this step up to (not including) the step that joins.
            let end = chain[index + 1..]
                .iter()
                .position(
                    |(_, edge)| matches!(edge, Some(e) if matches!(e.mode, EdgeMode::Join(_))),
                )
                .map_or(chain.len(), |offset| index + 1 + offset);
            let segment: Arc<[String]> = chain[index..end].iter().map(|(s, _)| s.clone()).collect();
            let branch_inputs: Vec<Vec<Region>> = match fan_out {
                FanOut::Static(count) => (0..*count).map(|_| current.clone()).collect(),
                FanOut::Each => current.into_iter().map(|region| vec![region]).collect(),
            };
            let (policy, joining) = match chain.get(end) {
                Some((
                    joining,
                    Some(Edge {
                        mode: EdgeMode::Join(policy),
                        ..
                    }),
                )) => (*policy, joining.clone()),
                // No join: the branches' outputs are the run's output, and all must succeed.
                _ => (
                    JoinPolicy {
                        timeout_ms: manifest.settings.timeout_ms,
                        on_failure: OnFailure::Fail,
                    },
                    "the end of the run".to_owned(),
                ),
            };
            current = fan_out_and_join(run, segment, branch_inputs, &policy, &joining).await?;
            index = end;
            continue;
        }
        let position = Position {
            step,
            branch: 0,
            branches: 1,
        };
        current = run_step(run, position, current).await?;
        index += 1;
    }
    Ok(current)
}

/// Runs `segment` once per branch, concurrently, and gathers the branches' outputs in
/// branch order as the join's policy says.
async fn fan_out_and_join(
    run: &Arc<RunShared>,
    segment: Arc<[String]>,
    branch_inputs: Vec<Vec<Region>>,
    policy: &JoinPolicy,
    joining: &str,
) -> Result<Vec<Region>, RunError> {
    let branches = branch_inputs.len() as u32;
    let spread = run.workflow.manifest().settings.spread_branches && !run.peers.is_empty();
    let mut tasks = JoinSet::new();
    for (branch, inputs) in branch_inputs.into_iter().enumerate() {
        let (run, segment) = (run.clone(), segment.clone());
        // Branch 0 stays here; the others go round the replicas, this one included.
        let peer = match branch % (run.peers.len() + 1) {
            0 => None,
            slot if spread => Some(run.peers[slot - 1].clone()),
            _ => None,
        };
        tasks.spawn(
            async move {
                let branch = branch as u32;
                if let Some(peer) = peer {
                    // A branch on a peer runs one step instance at a time there, and
                    // counts as one of the run's: its inputs' copy for the call is
                    // made only once it has its place.
                    let place = run.concurrency.acquire().await.expect("never closed");
                    match on_peer(&run, &*peer, &segment, branch, branches, inputs.clone()).await {
                        Ok(outputs) => return Ok((branch as usize, outputs)),
                        Err(None) => drop(place),
                        Err(Some(err)) => return Err(err),
                    }
                }
                let outputs = run_segment(&run, &segment, branch, branches, inputs).await?;
                Ok::<_, RunError>((branch as usize, outputs))
            }
            // A branch is a child of the run (and the parent of its steps' attempts), also
            // when it is spread to a peer.
            .instrument(tracing::info_span!("branch", branch, branches)),
        );
    }
    let timeout = Duration::from_millis(policy.timeout_ms);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut results: Vec<Option<Vec<Region>>> = vec![None; branches as usize];
    let mut finished = 0;
    while finished < branches as usize {
        let next = match tokio::time::timeout_at(deadline, tasks.join_next()).await {
            Err(_) => break,
            Ok(None) => break,
            Ok(Some(next)) => next,
        };
        finished += 1;
        match next {
            Ok(Ok((branch, outputs))) => results[branch] = Some(outputs),
            Ok(Err(err)) if policy.on_failure == OnFailure::Fail => return Err(err),
            Ok(Err(err)) => tracing::warn!(
                joining,
                cause = ?faas_invoke::log_excerpt(&err.to_string()),
                "dropping a failed branch"
            ),
            Err(join) => {
                return Err(RunError::StepFailed {
                    step: segment[0].clone(),
                    branch: 0,
                    attempts: 1,
                    cause: super::StepFailure::Returned(format!("branch task failed: {join}")),
                });
            }
        }
    }
    let missing = branches as usize - finished;
    if missing > 0 {
        tasks.abort_all();
        if policy.on_failure == OnFailure::Fail {
            return Err(RunError::JoinTimeout {
                step: joining.to_owned(),
                missing,
                timeout,
            });
        }
        tracing::warn!(joining, missing, "joining without branches that timed out");
    }
    Ok(results.into_iter().flatten().flatten().collect())
}

/// Runs the steps of `segment` in order as branch `branch` of `branches`.
async fn run_segment(
    run: &RunShared,
    segment: &[String],
    branch: u32,
    branches: u32,
    inputs: Vec<Region>,
) -> Result<Vec<Region>, RunError> {
    let mut current = inputs;
    for step in segment {
        let position = Position {
            step,
            branch,
            branches,
        };
        current = run_step(run, position, current).await?;
    }
    Ok(current)
}

/// Has `peer` run a branch. `Err(None)` when it could not take it (nothing ran there;
/// the caller runs the branch itself).
async fn on_peer(
    run: &RunShared,
    peer: &dyn BranchPeer,
    segment: &[String],
    branch: u32,
    branches: u32,
    inputs: Vec<Region>,
) -> Result<Vec<Region>, Option<RunError>> {
    let call = BranchCall {
        workflow: run.workflow.name().to_owned(),
        tenant: run.workflow.tenant().to_owned(),
        run_id: run.run_id.clone(),
        message: run.message.clone(),
        segment: segment.to_vec(),
        branch,
        branches,
        revision: None,
        remaining_ms: Some(
            run.deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64,
        ),
    };
    let (steps, outputs) = match peer.run_branch(call, inputs, run.owner.clone()).await {
        // The peer was reached but ran nothing: it has not loaded the run's revision yet
        // (peers come from placement, which runs ahead of loading), or it is draining.
        Ok((steps, Err(failure))) if steps.is_empty() && failure.is_unavailable() => Err(failure),
        reply => reply,
    }
    .map_err(|failure| {
        if !failure.ran_nothing() {
            // It reached the peer, and may have run there.
            return Some(RunError::RemoteBranch {
                branch,
                worker: peer.id().to_owned(),
                failure,
            });
        }
        tracing::warn!(
            worker = peer.id(),
            branch,
            "running the branch here: {failure}"
        );
        None
    })?;
    for mut step in steps {
        step.worker = Some(peer.id().to_owned());
        step.handoff = Some(peer.handoff().to_owned());
        run.recorder.push(step);
    }
    outputs.map_err(|failure| {
        Some(RunError::RemoteBranch {
            branch,
            worker: peer.id().to_owned(),
            failure,
        })
    })
}

/// Runs one branch another worker asked for, in that worker's run `call.run_id`,
/// and returns its step records with its outputs.
pub(crate) async fn run_branch(
    worker: Arc<Worker>,
    workflow: Arc<LoadedWorkflow>,
    call: BranchCall,
    inputs: Vec<Region>,
) -> (Vec<StepRecord>, Result<Vec<Region>, RunError>) {
    // What is left of the caller's run, not a deadline of its own: the caller stops
    // waiting then.
    let deadline = call.remaining().min(Duration::from_millis(
        workflow.manifest().settings.timeout_ms,
    ));
    let unknown = call
        .segment
        .iter()
        .find(|step| !workflow.manifest().steps.contains_key(*step));
    if let Some(step) = unknown {
        return (
            Vec::new(),
            Err(RunError::NoSteps(format!(
                "{} (no step `{step}`)",
                workflow.name()
            ))),
        );
    }
    let run = RunShared::new(
        worker,
        workflow,
        call.run_id,
        call.message,
        Arc::from([]),
        deadline,
    );
    let segment = run_segment(&run, &call.segment, call.branch, call.branches, inputs);
    let result = match tokio::time::timeout(deadline, segment).await {
        Ok(result) => result,
        Err(_) => Err(RunError::Timeout(deadline)),
    };
    // What this worker's budget left out is not sent: the caller's run counts only
    // the records it gets, within its own budget.
    (run.recorder.take().steps, result)
}

/// The owner of the regions of run `run_id` of `workflow`.
pub(crate) fn owner_of(workflow: &LoadedWorkflow, run_id: &str) -> RegionOwner {
    RegionOwner {
        tenant: workflow.tenant.clone(),
        workflow: workflow.name.clone(),
        run_id: run_id.into(),
    }
}

/// A random 64-bit run id, hex-encoded.
fn new_run_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WorkerConfig;
    use faas_invoke::{BoxFuture, EventFailure, FailureKind};
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A peer that takes every branch it is asked for and answers `reply`, running
    /// nothing.
    struct AnsweringPeer {
        reply: EventFailure,
        asked: AtomicUsize,
    }

    impl BranchPeer for AnsweringPeer {
        fn id(&self) -> &str {
            "w2"
        }

        fn handoff(&self) -> &'static str {
            "fd"
        }

        fn run_branch(
            &self,
            _call: BranchCall,
            _inputs: Vec<Region>,
            _owner: RegionOwner,
        ) -> BoxFuture<'_, Result<super::super::BranchReply, EventFailure>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            let reply = self.reply.clone();
            Box::pin(async move { Ok((Vec::new(), Err(reply))) })
        }
    }

    /// The word-count example (four branches) spreading its branches to `peer`, run
    /// on four words.
    async fn run_wordcount_with(peer: Arc<AnsweringPeer>) -> RunOutcome {
        let dir = tempfile::tempdir().unwrap();
        let worker = Arc::new(Worker::new(WorkerConfig::new(dir.path())).unwrap());
        let path = faas_testing::repo_root().join("functions/wordcount/workflow.toml");
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("concurrency = 8", "concurrency = 8\nspread_branches = true");
        let manifest = faas_workflow::Workflow::parse("workflow.toml", &text).unwrap();
        let components = ["split", "count", "merge"].map(|name| {
            (
                name.to_owned(),
                faas_invoke::Component::new(faas_testing::component(&format!("wc-{name}"))),
            )
        });
        let workflow = worker
            .load_workflow(&manifest, BTreeMap::from(components))
            .await
            .unwrap();
        let input = Region::new("text", b"one two three four".to_vec());
        let peers: Peers = Arc::from([peer as Arc<dyn BranchPeer>]);
        run(worker, Arc::new(workflow), input, None, peers).await
    }

    /// A peer placed with the workflow that has not loaded the run's revision yet
    /// answers `unavailable` with no step run: its branches run here instead of failing
    /// the run (placement runs ahead of loading, so this happens right after a deploy).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_branch_its_peer_could_not_run_runs_here() {
        let peer = Arc::new(AnsweringPeer {
            reply: EventFailure::unavailable("workflow `wordcount` is not loaded on worker `w2`"),
            asked: AtomicUsize::new(0),
        });
        let outcome = run_wordcount_with(peer.clone()).await;
        let outputs = outcome.result.expect("the run succeeds");
        let counts: serde_json::Value =
            serde_json::from_slice(&outputs[0].bytes().unwrap()).unwrap();
        for word in ["one", "two", "three", "four"] {
            assert_eq!(counts["counts"][word], 1, "{counts}");
        }
        assert_eq!(peer.asked.load(Ordering::SeqCst), 2, "branches 1 and 3");
        let counted: Vec<&StepRecord> = outcome
            .record
            .steps
            .iter()
            .filter(|step| step.step == "count")
            .collect();
        assert_eq!(counted.len(), 4, "{counted:?}");
        assert!(
            counted
                .iter()
                .all(|step| step.succeeded && step.worker.is_none())
        );
    }

    /// A branch that failed on its peer fails the run: only a branch that never ran
    /// there is run again here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_branch_that_failed_on_its_peer_fails_the_run() {
        let peer = Arc::new(AnsweringPeer {
            reply: EventFailure::new(FailureKind::StepFailed, 500, "count trapped"),
            asked: AtomicUsize::new(0),
        });
        let outcome = run_wordcount_with(peer).await;
        let err = outcome.result.expect_err("the run fails");
        assert!(
            matches!(&err, RunError::RemoteBranch { worker, .. } if worker == "w2"),
            "{err}"
        );
    }
}
