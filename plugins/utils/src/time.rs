//! `time_now`: the current date and time in an IANA time zone.

use serde_json::json;
use toolhost_plugin_api::{ToolError, tool};

/// Returns the current date and time in a time zone, as JSON with the ISO 8601 timestamp,
/// the UTC offset, the weekday and the Unix time. Use it whenever the answer depends on
/// today's date or the time somewhere; never guess the date.
#[tool(risk = read)]
pub(crate) fn time_now(
    /// IANA time zone name such as "Europe/Paris", "America/New_York" or "UTC".
    /// Defaults to UTC.
    timezone: Option<String>,
) -> Result<String, ToolError> {
    let name = timezone.as_deref().unwrap_or("UTC");
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::{Value, json};
    use toolhost_plugin_api::ToolError;
    use toolhost_plugin_api::testing::{TestHost, call};

    use super::time_now;

    fn now(args: Value) -> Value {
        serde_json::from_str(&call(&time_now, args).unwrap()).unwrap()
    }

    #[test]
    fn describes_a_read_tool_with_an_optional_zone() {
        let info = TestHost::new().describe(&time_now);
        assert_eq!(info.name, "time_now");
        assert_eq!(info.risk, toolhost_plugin_api::Risk::Read);
        assert!(info.schema.get("required").is_none());
        assert!(info.schema["properties"]["timezone"].is_object());
    }

    #[test]
    fn defaults_to_utc_and_tells_the_current_time() {
        let before = jiff::Timestamp::now().as_second();
        let out = now(json!({}));
        let after = jiff::Timestamp::now().as_second();
        assert_eq!(out["timezone"], "UTC");
        let unix = out["unix"].as_i64().unwrap();
        assert!((before..=after).contains(&unix), "{out}");
        let datetime = out["datetime"].as_str().unwrap();
        assert!(datetime.ends_with("+00:00"), "{datetime}");
        let parsed: jiff::Timestamp = datetime.parse().unwrap();
        assert_eq!(parsed.as_second(), unix);
        let weekdays = [
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
            "Sunday",
        ];
        assert!(
            weekdays.contains(&out["weekday"].as_str().unwrap()),
            "{out}"
        );
    }

    #[test]
    fn tells_the_time_in_a_named_zone() {
        let out = now(json!({"timezone": "Asia/Kolkata"}));
        assert_eq!(out["timezone"], "Asia/Kolkata");
        // No daylight saving there: always +05:30.
        assert!(
            out["datetime"].as_str().unwrap().ends_with("+05:30"),
            "{out}"
        );
        assert_eq!(out["utc_offset"], "+05:30");
    }

    #[test]
    fn refuses_unknown_zones_and_fields() {
        assert_eq!(
            call(&time_now, json!({"timezone": "Mars/Olympus"})),
            Err(ToolError::InvalidArgs(
                "unknown time zone 'Mars/Olympus'; use an IANA name such as 'Europe/Paris' or \
                 'UTC'"
                    .to_owned()
            ))
        );
        // The schema refuses it before the tool runs, with the host's message.
        assert_eq!(
            call(&time_now, json!({"tz": "UTC"})),
            Err(ToolError::InvalidArgs(
                "Additional properties are not allowed ('tz' was unexpected)".to_owned()
            ))
        );
    }
}
