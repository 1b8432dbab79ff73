//! `time_now`: the current date and time in an IANA time zone.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolhost_plugin_api::{Risk, ToolContext, ToolError, TypedTool};

/// Arguments of `time_now`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimeNowArgs {
    /// IANA time zone name such as "Europe/Paris", "America/New_York" or "UTC".
    /// Defaults to UTC.
    #[serde(default)]
    timezone: Option<String>,
}

pub(crate) struct TimeNow;

impl TypedTool for TimeNow {
    type Args = TimeNowArgs;

    fn name(&self) -> &str {
        "time_now"
    }

    fn description(&self) -> &str {
        "Returns the current date and time in a time zone, as JSON with the ISO 8601 \
         timestamp, the UTC offset, the weekday and the Unix time. Use it whenever the \
         answer depends on today's date or the time somewhere; never guess the date."
    }

    fn risk(&self) -> Risk {
        Risk::Read
    }

    async fn run(&self, _ctx: &ToolContext<'_>, args: TimeNowArgs) -> Result<String, ToolError> {
        let name = args.timezone.as_deref().unwrap_or("UTC");
        let tz = jiff::tz::TimeZone::get(name).map_err(|_| {
            ToolError::invalid_args(format!(
                "unknown time zone '{name}'; use an IANA name such as 'Europe/Paris' or 'UTC'"
            ))
        })?;
        let now = jiff::Timestamp::now().to_zoned_datetime(tz);
        Ok(json!({
            "timezone": name,
            "datetime": now.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string(),
            "weekday": now.strftime("%A").to_string(),
            "utc_offset": now.offset().to_string(),
            "unix": now.timestamp().as_second(),
        })
        .to_string())
    }
}
