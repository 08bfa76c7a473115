//! The stage for the credential and route attacks: tenants `victim` and `mallory`, each
//! with its own token made by the operator, and the victim's workflow deployed with the
//! victim's token and served.

use crate::support::{Platform, TOKEN, Upload, client, faas_as};
use reqwest::Method;
use reqwest::blocking::Response;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The victim's workflow name: no refusal shown to mallory may contain it.
pub(crate) const VICTIM_WORKFLOW: &str = "storefront";

/// The victim's routes: a prefix and an exact route.
pub(crate) const VICTIM_ROUTES: [&str; 2] = ["/shop/...", "/api/orders"];

/// A platform (embedded or services mode) with the two tenants set up.
pub(crate) struct Scene<P> {
    /// The gateway's URL.
    pub url: String,
    /// The victim's token secret.
    pub victim: String,
    /// The attacker's token secret.
    pub mallory: String,
    /// Where manifests are written.
    pub dir: tempfile::TempDir,
    /// What keeps the platform running.
    pub _host: P,
}

impl Scene<Platform> {
    /// A `faas up` platform with the scene set up.
    pub(crate) fn embedded() -> Self {
        Self::embedded_with(&["--no-demo"])
    }

    /// A `faas up` platform started with `args` (which name `--no-demo`), with the
    /// scene set up.
    pub(crate) fn embedded_with(args: &[&str]) -> Self {
        let platform = Platform::start_with(args);
        Self::set_up(platform.url.clone(), platform)
    }
}

impl<P> Scene<P> {
    /// Creates both tenants and their tokens with the admin token, deploys the victim's
    /// workflow with the victim's token, and checks that it is served.
    pub(crate) fn set_up(url: String, host: P) -> Self {
        for tenant in ["victim", "mallory"] {
            let created = faas_as(&url, TOKEN, &["tenant", "create", tenant]);
            assert_success(&created, "faas tenant create");
        }
        let scene = Self {
            victim: create_token(&url, TOKEN, "victim"),
            mallory: create_token(&url, TOKEN, "mallory"),
            url,
            dir: faas_testing::temp_dir(),
            _host: host,
        };
        let manifest = scene.manifest(VICTIM_WORKFLOW, Some("victim"), &VICTIM_ROUTES);
        assert_success(
            &scene.deploy(&scene.victim, &manifest),
            "the victim's deploy",
        );
        scene.assert_victim_served();
        scene
    }

    /// Writes a manifest of `functions/hello` on `routes`, naming `tenant` if given.
    pub(crate) fn manifest(&self, name: &str, tenant: Option<&str>, routes: &[&str]) -> PathBuf {
        write_hello(self.dir.path(), name, tenant, routes)
    }

    /// `faas <args>` with `token`.
    pub(crate) fn faas(&self, token: &str, args: &[&str]) -> Output {
        faas_as(&self.url, token, args)
    }

    /// `faas deploy --no-build <manifest>` with `token`.
    pub(crate) fn deploy(&self, token: &str, manifest: &Path) -> Output {
        self.faas(
            token,
            &[
                "deploy",
                "--no-build",
                manifest.to_str().expect("UTF-8 path"),
            ],
        )
    }

    /// An admin API request with `token`.
    pub(crate) fn api(&self, method: Method, path: &str, token: &str) -> Response {
        client()
            .request(method, format!("{}/admin/v1/{path}", self.url))
            .bearer_auth(token)
            .send()
            .expect("admin request")
    }

    /// A raw deploy upload of `manifest` (the hello component as function `main`) with
    /// `token`, so that the server's own answer (status, error fields) can be checked.
    pub(crate) fn upload(&self, token: &str, manifest: &Path) -> Response {
        let text = std::fs::read_to_string(manifest).expect("reading the manifest");
        Upload::of(&text, &[("main", &faas_testing::component("hello"))]).send(&self.url, token)
    }

    /// GET `path` on the gateway.
    pub(crate) fn get(&self, path: &str) -> Response {
        client()
            .get(format!("{}{path}", self.url))
            .send()
            .expect("GET failed")
    }

    /// Asserts that the victim's routes answer with the victim's workflow, and that its
    /// workflow is still the victim's, at its first revision.
    pub(crate) fn assert_victim_served(&self) {
        for path in [
            "/shop/checkout?name=victim",
            "/shop?name=victim",
            "/api/orders?name=victim",
        ] {
            let response = self.get(path);
            assert_eq!(
                response.status(),
                200,
                "the victim must be served at {path}"
            );
            assert!(response.text().unwrap().contains("Hello, victim"), "{path}");
        }
        let status = self.api(
            Method::GET,
            &format!("workflows/{VICTIM_WORKFLOW}"),
            &self.victim,
        );
        assert_eq!(status.status(), 200);
        let status: serde_json::Value = status.json().unwrap();
        assert_eq!(status["tenant"], "victim");
        assert_eq!(
            status["revision"], 1,
            "the victim's workflow was not replaced"
        );
    }
}

impl<P> Scene<P> {
    /// Removes tenant mallory and makes a tenant of that name again (for someone else,
    /// perhaps), with the operator's token; returns the new tenant's token.
    pub(crate) fn make_mallory_again(&self) -> String {
        for args in [["tenant", "rm", "mallory"], ["tenant", "create", "mallory"]] {
            assert_success(&self.faas(TOKEN, &args), &args.join(" "));
        }
        create_token(&self.url, TOKEN, "mallory")
    }

    /// Asserts that a deploy of workflow `name` on `route`, made with the old mallory's
    /// token before [`Self::make_mallory_again`], was refused (`answer`: its error),
    /// that nothing of it is served or listed for the new mallory (`new_token`), and
    /// that the victim is served.
    pub(crate) fn assert_stale_deploy_refused(
        &self,
        answer: &str,
        new_token: &str,
        name: &str,
        route: &str,
    ) {
        assert!(
            answer.contains("was revoked, or its tenant removed"),
            "{answer}"
        );
        assert_eq!(self.get(route).status(), 404);
        let listed = self.faas(new_token, &["ls", "--output", "json"]);
        assert_success(&listed, "faas ls");
        let listed = String::from_utf8_lossy(&listed.stdout);
        assert!(!listed.contains(name), "{listed}");
        self.assert_victim_served();
    }
}

/// Writes a manifest of `functions/hello` into `dir`.
pub(crate) fn write_hello(
    dir: &Path,
    name: &str,
    tenant: Option<&str>,
    routes: &[&str],
) -> PathBuf {
    let mut text = format!("name = \"{name}\"\n");
    if let Some(tenant) = tenant {
        text.push_str(&format!("tenant = \"{tenant}\"\n"));
    }
    text.push_str(&format!(
        "\n[functions.main]\ncomponent = \"{}\"\n",
        faas_testing::component_path("hello").display()
    ));
    for route in routes {
        text.push_str(&format!(
            "\n[[triggers.http]]\nroute = \"{route}\"\nfunction = \"main\"\n"
        ));
    }
    let path = dir.join(format!("{name}-{}.toml", next_suffix()));
    std::fs::write(&path, text).expect("writing a manifest");
    path
}

fn next_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// `faas token create <tenant> --output json` with `token`; returns the secret.
pub(crate) fn create_token(url: &str, token: &str, tenant: &str) -> String {
    let output = faas_as(url, token, &["token", "create", tenant, "--output", "json"]);
    assert_success(&output, "faas token create");
    let issued: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    issued["secret"].as_str().unwrap().to_owned()
}

/// Asserts that a `faas` command succeeded.
pub(crate) fn assert_success(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Asserts that a `faas` command failed; returns its stderr.
pub(crate) fn refused(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "expected a refusal, got success: {stderr}"
    );
    stderr
}
