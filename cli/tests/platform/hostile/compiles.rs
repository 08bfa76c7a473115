//! Components that are expensive to compile: a deploy compiles a tenant's component
//! before any limit of an instance applies, and Cranelift's time and memory grow with
//! the code it is given. Each compile runs in a child process bounded in time and
//! memory; past a bound only that deploy fails, with an error naming the flag, while
//! another tenant is served, and deploys after it go through.

use super::{Watch, assert_bystander_served, deploy_bystander};
use crate::services::Services;
use crate::support::{
    Platform, TOKEN, deploy_at, ensure_tenant_at, faas_as, faas_at, faas_command, repo,
    write_manifest, write_manifest_of,
};
use crate::tenants::scene::{Scene, assert_success, refused};
use std::path::Path;
use std::time::{Duration, Instant};
use wasm_encoder::{
    CodeSection, Component, ConstExpr, DataSection, Function, FunctionSection, InstanceSection,
    Instruction, MemorySection, MemoryType, Module, ModuleSection, TypeSection, ValType,
};

/// A component of 1.7 MiB that is expensive to compile: four functions of 200 locals
/// kept live at once (the register allocator's worst case), seconds of compiling and
/// about 250 MiB of the compiler's memory on the test build. `seed` makes its bytes,
/// and so its compile-cache entry, its own.
fn expensive_component(seed: i32) -> Vec<u8> {
    costly_component(seed, 40_000)
}

/// [`expensive_component`] with `rounds` of arithmetic a function in place of 40,000:
/// far cheaper to compile with fewer (the cost grows faster than the code).
fn costly_component(seed: i32, rounds: u32) -> Vec<u8> {
    let mut component = Component::new();
    component.section(&ModuleSection(&costly_module(seed, rounds)));
    component.finish()
}

/// The hello function (a valid HTTP component) carrying [`costly_module`] too, which
/// it never instantiates but Wasmtime compiles all the same.
fn costly_hello(seed: i32, rounds: u32) -> Vec<u8> {
    let mut bytes = std::fs::read(faas_testing::component_path("hello")).unwrap();
    // The section as an empty component would hold it, after that component's header.
    bytes.extend_from_slice(&costly_component(seed, rounds)[8..]);
    bytes
}

/// The core module of [`costly_component`].
fn costly_module(seed: i32, rounds: u32) -> Module {
    const FUNCTIONS: u32 = 4;
    const LOCALS: u32 = 200;
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32], [ValType::I32]);
    let (mut functions, mut code) = (FunctionSection::new(), CodeSection::new());
    for _ in 0..FUNCTIONS {
        functions.function(0);
        let mut body = Function::new([(LOCALS, ValType::I32)]);
        // From the parameter, so that nothing folds to a constant.
        for local in 1..=LOCALS {
            body.instruction(&Instruction::LocalGet(0))
                .instruction(&Instruction::I32Const(local as i32 * 31 + seed))
                .instruction(&Instruction::I32Mul)
                .instruction(&Instruction::LocalSet(local));
        }
        for round in 0..rounds {
            let (a, b) = (round % LOCALS + 1, (round * 7 + 3) % LOCALS + 1);
            body.instruction(&Instruction::LocalGet(a))
                .instruction(&Instruction::LocalGet(b))
                .instruction(&Instruction::I32Const(seed))
                .instruction(&Instruction::I32Add)
                .instruction(&Instruction::I32Mul)
                .instruction(&Instruction::LocalSet((round * 13 + 5) % LOCALS + 1));
        }
        for local in 1..=LOCALS {
            body.instruction(&Instruction::LocalGet(local));
        }
        for _ in 1..LOCALS {
            body.instruction(&Instruction::I32Xor);
        }
        body.instruction(&Instruction::End);
        code.function(&body);
    }
    let mut module = Module::new();
    module.section(&types).section(&functions).section(&code);
    module
}

/// A component of a few hundred bytes of `modules` core modules, the first
/// instantiated, each with `memories` memories of 16 MiB, each with two one-byte data
/// segments 15 MiB apart: Wasmtime lays initial data out as a whole image, zeros and
/// all, up to 16 MiB a memory, so each memory makes 15 MiB of compiled code file.
fn sparse_data_component(modules: u32, memories: u32) -> Vec<u8> {
    let (mut memory, mut data) = (MemorySection::new(), DataSection::new());
    for index in 0..memories {
        memory.memory(MemoryType {
            minimum: 256,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        for offset in [0, 15 << 20] {
            data.active(index, &ConstExpr::i32_const(offset), [7]);
        }
    }
    let mut module = Module::new();
    module.section(&memory).section(&data);
    let mut component = Component::new();
    for _ in 0..modules {
        component.section(&ModuleSection(&module));
    }
    let mut instances = InstanceSection::new();
    instances.instantiate(0, Vec::<(&str, wasm_encoder::ModuleArg)>::new());
    component.section(&instances);
    component.finish()
}

/// Deploys `component` as tenant mallory's workflow and returns the failed deploy's
/// stderr, and how long it took.
fn deploy_expensive(platform: &Platform, dir: &Path, component: Vec<u8>) -> (String, Duration) {
    let path = dir.join(format!("expensive-{}.wasm", component.len()));
    std::fs::write(&path, component).unwrap();
    let manifest = write_manifest_of(dir, "expensive", "mallory", &path, "/expensive", "");
    let started = Instant::now();
    let output = faas_at(&platform.url, &["deploy", manifest.to_str().unwrap()]);
    let took = started.elapsed();
    assert!(!output.status.success(), "the expensive component deployed");
    (String::from_utf8_lossy(&output.stderr).into_owned(), took)
}

/// After an expensive deploy failed: nothing of it is served, another tenant's deploy
/// goes through, and no compile child is left.
fn assert_platform_carries_on(platform: &Platform, dir: &Path) {
    assert_eq!(platform.get("/expensive").status(), 404);
    let manifest = write_manifest(dir, "after", "after", "hello", "/after", "");
    platform.deploy(&manifest);
    assert_eq!(platform.get("/after?name=x").status(), 200);
    assert_bystander_served(platform);
    let children = compile_children(platform.pid());
    assert!(children.is_empty(), "compile children left: {children:?}");
}

/// A seed of its own for each run: the compile cache outlives the test, and a compile
/// that once ran to its end would be a cache hit ever after (no compile to stop).
fn fresh_seed() -> i32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as i32
}

/// A compile child stopped (`SIGSTOP`) so that the deploy it belongs to waits for it
/// as long as a test needs.
struct StoppedCompile {
    pid: u32,
}

impl StoppedCompile {
    /// Waits (a minute at most) for a compile child of process `parent` that is not
    /// stopped yet, and stops it.
    fn next_of(parent: u32) -> Self {
        let deadline = Instant::now() + Duration::from_secs(60);
        let pid = loop {
            let children = compile_children(parent);
            if let Some((pid, _)) = children.iter().find(|(_, state)| *state != 'T') {
                break *pid;
            }
            assert!(Instant::now() < deadline, "no compile started");
            std::thread::sleep(Duration::from_millis(5));
        };
        let compile = Self { pid };
        compile.signal("-STOP");
        compile
    }

    /// Sends it signal `name` (`-CONT`, `-KILL`).
    fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([name, &self.pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {name} {}", self.pid);
    }
}

/// The compile children of process `parent` (pid and state, as `/proc` has them).
fn compile_children(parent: u32) -> Vec<(u32, char)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let dir = entry.ok()?.path();
            let pid: u32 = dir.file_name()?.to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // The state and the parent's pid are the first two fields after the
            // command's parentheses.
            let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
            let state = fields.next()?.chars().next()?;
            let of: u32 = fields.next()?.parse().ok()?;
            let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
            let compiling = String::from_utf8_lossy(&cmdline).contains("__compile-component");
            (of == parent && compiling).then_some((pid, state))
        })
        .collect()
}

#[test]
fn a_component_that_compiles_too_long_fails_its_own_deploy() {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start_with(&["--no-demo", "--compile-timeout-secs", "1"]);
    deploy_bystander(&platform, dir.path());
    let watch = Watch::start(&platform);
    let (error, took) = deploy_expensive(&platform, dir.path(), expensive_component(1));
    watch.finish();
    assert!(error.contains("--compile-timeout-secs"), "{error}");
    assert!(error.contains("compiling took longer"), "{error}");
    // A valid component, more than this worker compiles: not a bad component (400).
    assert!(error.contains("HTTP 422"), "{error}");
    assert!(!error.contains("not a valid"), "{error}");
    assert!(took < Duration::from_secs(30), "the deploy took {took:?}");
    assert_platform_carries_on(&platform, dir.path());
}

#[test]
fn a_component_that_needs_too_much_memory_to_compile_fails_its_own_deploy() {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start_with(&["--no-demo", "--compile-memory-mb", "128"]);
    deploy_bystander(&platform, dir.path());
    let resident_before = platform.memory("VmHWM");
    let watch = Watch::start(&platform);
    let (error, _) = deploy_expensive(&platform, dir.path(), expensive_component(2));
    watch.finish();
    assert!(error.contains("--compile-memory-mb"), "{error}");
    assert!(error.contains("128 MiB"), "{error}");
    assert!(error.contains("HTTP 422"), "{error}");
    // The compile's memory was the child's (about 250 MiB had it run to the end): the
    // platform's peak grew by little more than the 1.7 MiB upload.
    let grew = platform.memory("VmHWM").saturating_sub(resident_before);
    assert!(grew < 96 << 20, "the platform grew by {} MiB", grew >> 20);
    assert_platform_carries_on(&platform, dir.path());
}

#[test]
fn a_worker_process_reports_a_compile_past_its_limit_as_such() {
    let dir = faas_testing::temp_dir();
    let mut services = Services::start(&[]);
    services.start_worker_with("w1", &["--compile-memory-mb", "128"]);
    let path = dir.path().join("expensive.wasm");
    std::fs::write(&path, expensive_component(3)).unwrap();
    let manifest = write_manifest_of(dir.path(), "expensive", "mallory", &path, "/expensive", "");
    let output = faas_at(&services.url, &["deploy", manifest.to_str().unwrap()]);
    assert!(!output.status.success(), "the expensive component deployed");
    let error = String::from_utf8_lossy(&output.stderr);
    // The worker's kind of failure reaches the deploy through the shared state, as
    // the gateway's own would.
    assert!(error.contains("worker `w1`"), "{error}");
    assert!(error.contains("--compile-memory-mb"), "{error}");
    assert!(error.contains("HTTP 422"), "{error}");
    deploy_at(&services.url, &repo("functions/hello/workflow.toml"));
    let hello = services.get("/hello?name=after");
    assert_eq!(hello.text().unwrap().trim(), "Hello, after!");
}

/// A worker of services mode loaded the workflows placed on it one after another: one
/// tenant's compile held up every other tenant's deploy on that worker until it ended
/// (up to `--compile-timeout-secs`). Mallory's compile is stopped here (`SIGSTOP` on
/// its compile child), to last as long as the test needs; victim's deploy to the same
/// worker goes through meanwhile.
#[test]
fn a_tenants_compile_under_way_holds_up_no_other_tenants_deploy_on_the_worker() {
    let mut services = Services::start(&[]);
    services.start_worker_with("w1", &["--compile-timeout-secs", "300"]);
    let worker = services.worker("w1").pid();
    let dir = faas_testing::temp_dir();
    let mallory = start_expensive_deploy(&services.url, dir.path(), "mallory", fresh_seed());
    let compile = StoppedCompile::next_of(worker);

    let shop = write_manifest(dir.path(), "shop", "victim", "hello", "/shop", "");
    deploy_at(&services.url, &shop);
    let hello = services.get("/shop?name=victim");
    assert_eq!(hello.text().unwrap().trim(), "Hello, victim!");
    // Mallory's deploy, and its compile, were under way all along.
    assert!(
        !mallory.is_finished(),
        "victim's deploy waited for mallory's"
    );
    assert!(
        compile_children(worker).contains(&(compile.pid, 'T')),
        "mallory's compile child is no longer stopped: {:?}",
        compile_children(worker)
    );

    // Killed, it fails mallory's deploy only.
    compile.signal("-KILL");
    let output = mallory.join().unwrap();
    assert!(!output.status.success(), "{output:?}");
    assert_eq!(services.get("/shop?name=again").status(), 200);
}

/// Embedded mode compiled a deploy's components under the deploy lock, which every
/// deploy takes in turn: one tenant's compile held up every other tenant's deploy
/// until it ended (up to `--compile-timeout-secs`). The compile now runs before the
/// lock is taken. With two tenants' compiles under way (as many as run at once), a
/// deploy of code compiled already goes through too: its load waited for a compile
/// thread, which each compile held while its child ran.
#[test]
fn embedded_two_tenants_compiles_under_way_hold_up_no_other_tenants_deploy() {
    let platform = Platform::start_with(&["--no-demo", "--compile-timeout-secs", "300"]);
    let dir = faas_testing::temp_dir();
    let first = write_manifest(dir.path(), "first", "victim", "hello", "/first", "");
    deploy_at(&platform.url, &first);
    let compiling = stop_two_tenants_compiles(&platform.url, dir.path(), platform.pid());

    let shop = write_manifest(dir.path(), "shop", "victim", "hello", "/shop", "");
    deploy_at(&platform.url, &shop);
    let hello = platform.get("/shop?name=victim");
    assert_eq!(hello.text().unwrap().trim(), "Hello, victim!");
    for (deploy, compile) in compiling {
        assert!(!deploy.is_finished(), "a compile's deploy ended early");
        compile.signal("-KILL");
        let output = deploy.join().unwrap();
        assert!(!output.status.success(), "{output:?}");
    }
    assert_eq!(platform.get("/mallory").status(), 404);
    assert_eq!(platform.get("/first?name=again").status(), 200);
}

/// A workflow's compiles have `--compile-timeout-secs` in all, and their waits for a
/// compile place do not count. Only the wait of the compile that waited was taken off
/// its time: the later components had what that wait left. The victim's workflow of
/// three components waits 40 s of its 45 while mallory's and eve's compiles hold both
/// places (stopped, then killed); its next compile then ran out of time, and the deploy
/// failed. (The 5 s left are less than its three compiles take on a fast machine, the
/// 45 s more than they take on a slow one.)
#[test]
fn a_workflow_whose_first_compile_waited_for_a_place_keeps_its_whole_time_for_the_rest() {
    const HELD: Duration = Duration::from_secs(40);
    let platform = Platform::start_with(&["--no-demo", "--compile-timeout-secs", "45"]);
    let dir = faas_testing::temp_dir();
    let compiling = stop_two_tenants_compiles(&platform.url, dir.path(), platform.pid());
    // About 2.5 s of compiling each on the test build here, 8 s on a slow machine.
    let mut manifest = "name = \"trio\"\ntenant = \"victim\"\n\n".to_owned();
    for (index, seed) in (0..3).zip(fresh_seed()..) {
        let path = dir.path().join(format!("trio-{index}.wasm"));
        std::fs::write(&path, costly_hello(seed, 8_000)).unwrap();
        manifest.push_str(&format!(
            "[functions.f{index}]\ncomponent = \"{}\"\n\n\
             [[triggers.http]]\nroute = \"/trio/{index}\"\nfunction = \"f{index}\"\n\n",
            path.display()
        ));
    }
    let manifest_path = dir.path().join("trio.toml");
    std::fs::write(&manifest_path, manifest).unwrap();
    let url = platform.url.clone();
    let deploy =
        std::thread::spawn(move || faas_at(&url, &["deploy", manifest_path.to_str().unwrap()]));
    std::thread::sleep(HELD);
    assert!(!deploy.is_finished(), "the victim's deploy did not wait");
    for (attack, compile) in compiling {
        compile.signal("-KILL");
        assert!(!attack.join().unwrap().status.success());
    }
    let output = deploy.join().unwrap();
    assert!(
        output.status.success(),
        "the victim's deploy failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    for index in 0..3 {
        let hello = platform.get(&format!("/trio/{index}?name=victim"));
        assert_eq!(hello.text().unwrap().trim(), "Hello, victim!");
    }
}

/// A deploy whose client went while its component compiled: its request was dropped,
/// but the compile ran on in its child to `--compile-timeout-secs`, holding one of the
/// worker's two compile places, and a tenant could start the next at once. Mallory's
/// and eve's compiles are stopped here (`SIGSTOP`: on the old code they held their
/// places to the timeout, 300 s) and their clients killed. Their children are killed
/// at once, and victim's deploy of a component compiled for it goes through.
#[test]
fn a_deploy_whose_client_went_stops_its_compile_and_gives_its_place_to_others() {
    let platform = Platform::start_with(&["--no-demo", "--compile-timeout-secs", "300"]);
    check_given_up_compiles_stop(&platform.url, platform.pid(), |path| platform.get(path));
}

/// The same in services mode, where a worker loads a deploy's staged revision on a
/// task of its own that nothing dropped: its compile ran on to the timeout after the
/// gateway gave the deploy up. Now the worker stops a load whose revision is no longer
/// placed on it (the deploy's lease lapsed and the scheduler dropped the revision).
#[test]
fn services_mode_a_deploy_whose_client_went_stops_its_compile_on_the_worker() {
    let mut services = Services::start(&[]);
    services.start_worker_with("w1", &["--compile-timeout-secs", "300"]);
    let worker = services.worker("w1").pid();
    check_given_up_compiles_stop(&services.url, worker, |path| services.get(path));
}

/// Starts mallory's and eve's deploys of expensive components through the gateway at
/// `url`, stops their compile children (of process `compiler`) and kills their
/// clients; asserts that the children are gone within 30 s and that a victim's deploy
/// that compiles goes through and is served (`get`).
fn check_given_up_compiles_stop(
    url: &str,
    compiler: u32,
    get: impl Fn(&str) -> reqwest::blocking::Response,
) {
    let dir = faas_testing::temp_dir();
    let mut compiles = Vec::new();
    for (tenant, seed) in ["mallory", "eve"].into_iter().zip(fresh_seed()..) {
        let manifest = expensive_manifest(url, dir.path(), tenant, seed);
        let mut client = faas_command(url, TOKEN, &["deploy", &manifest])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        compiles.push(StoppedCompile::next_of(compiler));
        client.kill().unwrap();
        client.wait().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while compiles.iter().any(|compile| {
        compile_children(compiler)
            .iter()
            .any(|(pid, _)| *pid == compile.pid)
    }) {
        assert!(
            Instant::now() < deadline,
            "the compiles of deploys whose clients went are still there: {:?}",
            compile_children(compiler)
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let path = dir.path().join("victim.wasm");
    std::fs::write(&path, costly_hello(fresh_seed(), 1_000)).unwrap();
    let manifest = write_manifest_of(dir.path(), "shop", "victim", &path, "/shop", "");
    deploy_at(url, &manifest);
    let hello = get("/shop?name=victim");
    assert_eq!(hello.text().unwrap().trim(), "Hello, victim!");
    assert_eq!(get("/mallory").status(), 404);
}

/// Writes the manifest of `tenant`'s workflow of that name, on route `/<tenant>`, of
/// [`expensive_component`] (`seed`), and makes the tenant at `url`; returns its path.
fn expensive_manifest(url: &str, dir: &Path, tenant: &str, seed: i32) -> String {
    ensure_tenant_at(url, tenant);
    let path = dir.join(format!("{tenant}.wasm"));
    std::fs::write(&path, expensive_component(seed)).unwrap();
    let manifest = write_manifest_of(dir, tenant, tenant, &path, &format!("/{tenant}"), "");
    manifest.to_str().unwrap().to_owned()
}

/// Starts deploying mallory's and eve's [`expensive_component`]s through the gateway
/// at `url`, and stops each one's compile child (of process `compile_parent`): they
/// take the two places of compiles at once. Returns each deploy with its compile.
fn stop_two_tenants_compiles(
    url: &str,
    dir: &Path,
    compile_parent: u32,
) -> Vec<(
    std::thread::JoinHandle<std::process::Output>,
    StoppedCompile,
)> {
    ["mallory", "eve"]
        .into_iter()
        .zip(fresh_seed()..)
        .map(|(tenant, seed)| start_expensive_deploy(url, dir, tenant, seed))
        .map(|deploy| (deploy, StoppedCompile::next_of(compile_parent)))
        .collect()
}

/// Starts deploying [`expensive_component`] (`seed`) as `tenant`'s workflow of that
/// name on route `/<tenant>` through the gateway at `url`, on a thread of its own.
fn start_expensive_deploy(
    url: &str,
    dir: &Path,
    tenant: &str,
    seed: i32,
) -> std::thread::JoinHandle<std::process::Output> {
    let manifest = expensive_manifest(url, dir, tenant, seed);
    let url = url.to_owned();
    std::thread::spawn(move || faas_at(&url, &["deploy", &manifest]))
}

#[test]
fn a_component_of_sparse_initial_data_makes_no_more_code_than_its_size_allows_and_a_refused_one_leaves_nothing_cached()
 {
    // A component of a few hundred bytes could compile to hundreds of MiB of code file,
    // which the worker read whole into its memory and wrote to its cache; and one it
    // then refused at load (more memories than an instance may have) left its file
    // there, deploy after deploy, with nothing pruning it, until the disk was full.
    let dir = faas_testing::temp_dir();
    let cache = faas_testing::temp_dir();
    let cache_dir = cache.path().to_str().unwrap();
    let platform = Platform::start_with(&["--no-demo", "--cache-dir", cache_dir]);
    deploy_bystander(&platform, dir.path());
    let cached = || -> Vec<u64> {
        walk(cache.path())
            .iter()
            .filter(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
            .map(|path| std::fs::metadata(path).map_or(0, |file| file.len()))
            .collect()
    };
    let before = cached();
    // 30 MiB of code file for a module of more memories than an instance may have: it
    // compiles, is refused at load, and nothing of it stays.
    let (error, _) = deploy_expensive(&platform, dir.path(), sparse_data_component(1, 2));
    assert!(error.contains("memories count of 2"), "{error}");
    assert_eq!(cached(), before, "the refused component stayed cached");
    // 240 MiB of code file for modules it never instantiates (which no limit of an
    // instance looks at): refused while compiling, and nothing stays either.
    let (error, _) = deploy_expensive(&platform, dir.path(), sparse_data_component(16, 1));
    assert!(error.contains("compiled code would pass 32 MiB"), "{error}");
    assert!(error.contains("HTTP 422"), "{error}");
    assert_eq!(cached(), before, "the refused component stayed cached");
    assert_platform_carries_on(&platform, dir.path());
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .flat_map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                walk(&path)
            } else {
                vec![path]
            }
        })
        .collect()
}

#[test]
fn a_deploy_of_many_functions_compiles_within_one_timeout_in_all() {
    // The timeout was each component's: a deploy of 128 functions, each compiling for
    // just under it, held the deploy lock (which every other deploy waits for) 128
    // times as long.
    const FUNCTIONS: i32 = 16;
    let dir = faas_testing::temp_dir();
    // A cache of its own: code compiled by an earlier run would take no time.
    let cache = faas_testing::temp_dir();
    let platform = Platform::start_with(&[
        "--no-demo",
        "--compile-timeout-secs",
        "3",
        "--cache-dir",
        cache.path().to_str().unwrap(),
    ]);
    deploy_bystander(&platform, dir.path());
    let mut manifest = "name = \"many\"\ntenant = \"mallory\"\n\n".to_owned();
    for index in 0..FUNCTIONS {
        let path = dir.path().join(format!("costly-{index}.wasm"));
        std::fs::write(&path, costly_hello(100 + index, 8_000)).unwrap();
        manifest.push_str(&format!(
            "[functions.f{index}]\ncomponent = \"{}\"\n\n\
             [[triggers.http]]\nroute = \"/many/{index}\"\nfunction = \"f{index}\"\n\n",
            path.display()
        ));
    }
    let manifest_path = dir.path().join("many.toml");
    std::fs::write(&manifest_path, manifest).unwrap();
    let started = Instant::now();
    let output = faas_at(&platform.url, &["deploy", manifest_path.to_str().unwrap()]);
    let took = started.elapsed();
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{error}");
    assert!(
        error.contains("3 s in all, --compile-timeout-secs"),
        "{error}"
    );
    assert!(took < Duration::from_secs(15), "the deploy took {took:?}");
    assert_platform_carries_on(&platform, dir.path());
}

/// Services mode with one worker, `w1`, whose compiles may take 300 s, and the
/// tenants' scene set up on it; returns the scene and the worker's pid.
fn scene_on_one_worker() -> (Scene<Services>, u32) {
    let mut services = Services::start(&[]);
    services.start_worker_with("w1", &["--compile-timeout-secs", "300"]);
    let worker = services.worker("w1").pid();
    (Scene::set_up(services.url.clone(), services), worker)
}

/// A worker loads two workflows at once that may compile. Two tenants' compiles took
/// both places, and a load that compiled nothing (a component compiled already) waited
/// behind them for up to `--compile-timeout-secs` (120), as long as the gateway waits
/// for a load: the victim's deploy failed. Now such a load takes no place. Mallory's
/// and eve's compiles are stopped (`SIGSTOP`) while the victim deploys its hello again.
#[test]
fn two_tenants_compiles_under_way_hold_up_no_deploy_that_compiles_nothing() {
    // The victim's hello is compiled and loaded on w1 from here on.
    let (scene, worker) = scene_on_one_worker();
    let compiling = stop_two_tenants_compiles(&scene.url, scene.dir.path(), worker);

    let again = scene.manifest("again", Some("victim"), &["/again"]);
    assert_success(&scene.deploy(&scene.victim, &again), "the victim's deploy");
    let hello = scene.get("/again?name=victim");
    assert_eq!(hello.text().unwrap().trim(), "Hello, victim!");
    scene.assert_victim_served();
    for (deploy, compile) in compiling {
        assert!(!deploy.is_finished(), "a compile's deploy ended early");
        compile.signal("-KILL");
        refused(&deploy.join().unwrap());
    }
}

/// A tenant's deploy in services mode waits for its workers without the deploy lock,
/// so the operator can remove the tenant meanwhile, and make a tenant of the same name
/// again (for someone else). The removed tenant's deploy then went live in the new
/// tenant's name when its load ended: its code, on the new tenant's routes, with the
/// new tenant's data. Now the deploy goes live only while the token that made it is
/// live. Mallory's compile is stopped (`SIGSTOP`) while the operator does that.
#[test]
fn a_deploy_whose_tenant_was_removed_and_made_again_while_it_loaded_does_not_go_live() {
    let (scene, worker) = scene_on_one_worker();
    let url = scene.url.clone();
    // Quick to compile once let go.
    let path = scene.dir.path().join("stale.wasm");
    std::fs::write(&path, costly_hello(fresh_seed(), 2_000)).unwrap();
    let stale = write_manifest_of(scene.dir.path(), "stale", "mallory", &path, "/stale", "");
    let (deploy_url, old_token) = (url.clone(), scene.mallory.clone());
    let old_deploy = std::thread::spawn(move || {
        faas_as(
            &deploy_url,
            &old_token,
            &["deploy", stale.to_str().unwrap()],
        )
    });
    let compile = StoppedCompile::next_of(worker);

    let new_token = scene.make_mallory_again();
    compile.signal("-CONT");

    let stderr = refused(&old_deploy.join().unwrap());
    scene.assert_stale_deploy_refused(&stderr, &new_token, "stale", "/stale");
    // The new tenant's own deploy goes through.
    let own = scene.manifest("own", Some("mallory"), &["/own"]);
    assert_success(&scene.deploy(&new_token, &own), "the new tenant's deploy");
    assert_eq!(scene.get("/own?name=new").status(), 200);
}
