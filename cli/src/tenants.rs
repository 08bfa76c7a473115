//! `faas tenant` and `faas token`: the operator manages tenants; tokens are managed by
//! the operator for any tenant, or by a tenant's token for its own tenant.

use crate::client::{Client, ServerArgs};
use crate::output::{OutputArgs, OutputFormat};
use anyhow::Context;
use faas_gateway::admin::{QuotaChanges, Quotas};
use serde::Serialize;

/// A tenant's own limits, as `faas tenant create` and `faas tenant set` take them.
/// Each is a number (0 for no limit, except `--max-instances`) or `default` (the
/// platform's own, from the flags of `faas up` / `faas gateway` / `faas worker`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct QuotaArgs {
    /// How many workflows the tenant may have deployed (default: the gateway's
    /// --tenant-max-workflows).
    #[arg(long, value_name = "N|default", value_parser = parse_limit)]
    pub max_workflows: Option<Limit>,
    /// How many instances the tenant may run at once, per worker, at least 1 (default:
    /// the worker's --max-instances-per-tenant).
    #[arg(long, value_name = "N|default", value_parser = parse_limit)]
    pub max_instances: Option<Limit>,
    /// How many key-value keys the tenant may keep (default: --kv-max-keys).
    #[arg(long, value_name = "N|default", value_parser = parse_limit)]
    pub kv_max_keys: Option<Limit>,
    /// How many bytes of key-value keys and values the tenant may keep (default:
    /// --kv-max-bytes).
    #[arg(long, value_name = "N|default", value_parser = parse_limit)]
    pub kv_max_bytes: Option<Limit>,
    /// How many entries each of the tenant's streams and dead-letter streams keeps
    /// when appended to (default: --stream-max-len).
    #[arg(long, value_name = "N|default", value_parser = parse_limit)]
    pub stream_max_len: Option<Limit>,
    /// How many bytes the tenant's streams hold in all (default: --stream-max-bytes).
    #[arg(long, value_name = "N|default", value_parser = parse_limit)]
    pub stream_max_bytes: Option<Limit>,
    /// How many MiB of guest memory the tenant's instances may hold at once, per
    /// worker; 0 for no share of its own, only the worker's whole --guest-memory-mb
    /// (default: the worker's --tenant-guest-memory-mb).
    #[arg(long, value_name = "N|default", value_parser = parse_limit)]
    pub guest_memory_mb: Option<Limit>,
    /// How many MiB the components of the tenant's deployed workflows may take in all
    /// (default: the gateway's --tenant-code-max-mb).
    #[arg(long, value_name = "N|default", value_parser = parse_limit)]
    pub code_max_mb: Option<Limit>,
    /// How many bytes of log lines the tenant's workflows keep in all (default: the
    /// gateway's or worker's --log-max-bytes).
    #[arg(long, value_name = "N|default", value_parser = parse_limit)]
    pub log_max_bytes: Option<Limit>,
}

/// One limit on the command line: a number, or `default` (`None`).
#[derive(Debug, Clone, Copy)]
pub struct Limit(Option<u64>);

fn parse_limit(value: &str) -> Result<Limit, String> {
    if value == "default" {
        return Ok(Limit(None));
    }
    value
        .parse()
        .map(|n| Limit(Some(n)))
        .map_err(|_| format!("`{value}` is neither a count nor `default`"))
}

impl QuotaArgs {
    /// The changes these flags make; a flag not given changes nothing.
    ///
    /// # Errors
    /// If `--max-instances` does not fit 32 bits.
    pub fn changes(&self) -> anyhow::Result<QuotaChanges> {
        let max_instances = self
            .max_instances
            .map(|Limit(limit)| limit.map(u32::try_from).transpose())
            .transpose()
            .context("--max-instances is too large")?;
        let limit = |flag: Option<Limit>| flag.map(|Limit(limit)| limit);
        Ok(QuotaChanges {
            max_workflows: limit(self.max_workflows),
            max_instances,
            kv_max_keys: limit(self.kv_max_keys),
            kv_max_bytes: limit(self.kv_max_bytes),
            stream_max_len: limit(self.stream_max_len),
            stream_max_bytes: limit(self.stream_max_bytes),
            guest_memory_mb: limit(self.guest_memory_mb),
            code_max_mb: limit(self.code_max_mb),
            log_max_bytes: limit(self.log_max_bytes),
        })
    }
}

/// A limit as `faas tenant ls` shows it.
fn shown(limit: Option<impl std::fmt::Display>) -> String {
    limit.map_or_else(|| "default".to_owned(), |limit| limit.to_string())
}

/// `faas tenant ...`.
#[derive(Debug, clap::Subcommand)]
pub enum TenantCommand {
    /// Create a tenant (admin token), with its own quotas if given.
    Create {
        /// Its name: 1 to 63 characters from a-z, 0-9 and `-`, starting with a letter.
        name: String,
        #[command(flatten)]
        quotas: QuotaArgs,
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Change a tenant's quotas (admin token); takes effect without a restart.
    Set {
        /// The tenant's name.
        name: String,
        #[command(flatten)]
        quotas: QuotaArgs,
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List the tenants and their quotas (admin token).
    Ls {
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Remove a tenant with no deployed workflows, revoking its tokens (admin token).
    Rm {
        /// The tenant's name.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// `faas token ...`.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Create a token for a tenant and print its secret, which is shown only this once.
    Create {
        /// The tenant it acts for.
        tenant: String,
        /// What the token is for, shown in `faas token ls`.
        #[arg(long, default_value = "")]
        label: String,
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List tokens (without their secrets): of one tenant, or all the caller may see.
    Ls {
        /// Only this tenant's tokens.
        tenant: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Revoke a token by its id (`tok_...`): its secret is refused from now on.
    Revoke {
        /// The token's id.
        id: String,
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// Prints `value` as JSON, or as `text` says.
fn print<T: Serialize>(
    value: &T,
    format: OutputFormat,
    text: impl FnOnce(&T),
) -> anyhow::Result<()> {
    match format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(value)?),
        OutputFormat::Text => text(value),
    }
    Ok(())
}

/// Runs `faas tenant ...`.
pub async fn tenant(command: TenantCommand) -> anyhow::Result<()> {
    match command {
        TenantCommand::Create {
            name,
            quotas,
            server,
            output,
        } => {
            let quotas = quotas.changes()?.applied_to(Quotas::default());
            let tenant = Client::new(&server)?.create_tenant(&name, quotas).await?;
            print(&tenant, output.output, |tenant| {
                println!("created tenant {}", tenant.name);
                println!(
                    "create its first token with `faas token create {}`",
                    tenant.name
                );
            })
        }
        TenantCommand::Set {
            name,
            quotas,
            server,
            output,
        } => {
            let changes = quotas.changes()?;
            if changes == QuotaChanges::default() {
                anyhow::bail!(
                    "nothing to change: give at least one of --max-workflows, \
                     --max-instances, --kv-max-keys, --kv-max-bytes, --stream-max-len, \
                     --stream-max-bytes"
                );
            }
            let tenant = Client::new(&server)?
                .set_tenant_quotas(&name, &changes)
                .await?;
            print(&tenant, output.output, |tenant| {
                println!("set the quotas of tenant {}", tenant.name);
            })
        }
        TenantCommand::Ls { server, output } => {
            let list = Client::new(&server)?.tenants().await?;
            print(&list, output.output, |list| {
                println!(
                    "{:<24} {:<12} {:<10} {:<10} {:<10} {:<12} {:<15} {:<13} {:<13} {:<8} LOG-BYTES",
                    "TENANT",
                    "CREATED",
                    "WORKFLOWS",
                    "INSTANCES",
                    "KV-KEYS",
                    "KV-BYTES",
                    "STREAM-MAX-LEN",
                    "STREAM-BYTES",
                    "GUEST-MEM-MB",
                    "CODE-MB"
                );
                for tenant in &list.tenants {
                    let quotas = &tenant.quotas;
                    println!(
                        "{:<24} {:<12} {:<10} {:<10} {:<10} {:<12} {:<15} {:<13} {:<13} {:<8} {}",
                        tenant.name,
                        tenant.created_at,
                        shown(quotas.max_workflows),
                        shown(quotas.max_instances),
                        shown(quotas.kv_max_keys),
                        shown(quotas.kv_max_bytes),
                        shown(quotas.stream_max_len),
                        shown(quotas.stream_max_bytes),
                        shown(quotas.guest_memory_mb),
                        shown(quotas.code_max_mb),
                        shown(quotas.log_max_bytes),
                    );
                }
            })
        }
        TenantCommand::Rm {
            name,
            server,
            output,
        } => {
            let removed = Client::new(&server)?.remove_tenant(&name).await?;
            print(&removed, output.output, |removed| {
                println!(
                    "removed tenant {name} (revoked {} tokens; removed {} key-value entries \
                     and {} stream keys)",
                    removed["revoked_tokens"],
                    removed["removed_kv_entries"],
                    removed["removed_stream_keys"]
                );
                if let Some(note) = removed["note"].as_str() {
                    println!("  {note}");
                }
            })
        }
    }
}

/// Runs `faas token ...`.
pub async fn token(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create {
            tenant,
            label,
            server,
            output,
        } => {
            let issued = Client::new(&server)?.create_token(&tenant, &label).await?;
            print(&issued, output.output, |issued| {
                println!(
                    "created token {} for tenant {}",
                    issued.token.id, issued.token.tenant
                );
                println!("secret (shown only now; pass it as --token or FAAS_TOKEN):");
                println!("{}", issued.secret);
            })
        }
        TokenCommand::Ls {
            tenant,
            server,
            output,
        } => {
            let list = Client::new(&server)?.tokens(tenant.as_deref()).await?;
            print(&list, output.output, |list| {
                println!("{:<22} {:<24} {:<12} LABEL", "ID", "TENANT", "CREATED");
                for token in &list.tokens {
                    println!(
                        "{:<22} {:<24} {:<12} {}",
                        token.id, token.tenant, token.created_at, token.label
                    );
                }
            })
        }
        TokenCommand::Revoke { id, server, output } => {
            let revoked = Client::new(&server)?.revoke_token(&id).await?;
            print(&revoked, output.output, |revoked| {
                println!("revoked token {} of tenant {}", revoked.id, revoked.tenant);
            })
        }
    }
}
