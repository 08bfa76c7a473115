//! One component playing the three steps of the retry-chain workflow, chosen by the
//! config `role`: "first" answers `first`; "flaky" fails on its first attempt and on a
//! retry appends `,flaky(attempt N)` to its input; "last" appends `,last`. With a retry
//! policy on the flaky step, the run answers `first,flaky(attempt 2),last`.

use faas_sdk::step::{Context, Region};

#[faas_sdk::step]
fn handle(ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let role = faas_sdk::config::get("role").unwrap_or_default();
    let input = match inputs.as_slice() {
        [] => String::new(),
        [region] => String::from_utf8(region.bytes()).map_err(|e| e.to_string())?,
        _ => return Err(format!("expected at most one region, got {}", inputs.len())),
    };
    let output = step(&role, ctx.attempt, &input)?;
    faas_sdk::log::info(&format!("{role} (attempt {}): {output}", ctx.attempt));
    Ok(vec![Region::from_bytes("text", output.as_bytes())])
}

/// What the step with `role` answers on `attempt` (1 = first try) given `input`.
fn step(role: &str, attempt: u32, input: &str) -> Result<String, String> {
    match role {
        "first" => Ok("first".to_owned()),
        "flaky" if attempt == 1 => Err("failing on purpose on attempt 1".to_owned()),
        "flaky" => Ok(format!("{input},flaky(attempt {attempt})")),
        "last" => Ok(format!("{input},last")),
        _ => Err(format!(
            "config `role` must be first, flaky or last, not {role:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::step;

    #[test]
    fn chain_succeeds_on_the_second_attempt() {
        let first = step("first", 1, "ignored").unwrap();
        assert!(step("flaky", 1, &first).is_err());
        let flaky = step("flaky", 2, &first).unwrap();
        assert_eq!(
            step("last", 1, &flaky).unwrap(),
            "first,flaky(attempt 2),last"
        );
        assert!(step("other", 1, "").is_err());
    }
}
