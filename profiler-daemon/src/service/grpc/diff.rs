//! The Diff handler: two past windows (or two selectors) read as the
//! caller may see them, compared function by function, and drawn when
//! asked.

use profiler_common::SampleKind;

use super::{ApiError, ProfilerService, Sight, convert, limits};
use crate::{profile::ReportOptions, proto::v1, report, service::access::Caller};

/// Rows of the text table unless the request says otherwise.
const DEFAULT_LIMIT: usize = 50;

impl ProfilerService {
    pub(super) async fn do_diff(
        &self,
        caller: Caller,
        request: v1::DiffRequest,
    ) -> Result<v1::DiffReply, ApiError> {
        let window = |window: Option<v1::Window>, name: &str| {
            window.ok_or_else(|| {
                ApiError::invalid(format!("{name} must give the window (start_unix_nanos)"))
            })
        };
        let (base, target) = (
            window(request.base, "base")?,
            window(request.target, "target")?,
        );
        let base_selector = convert::selector_of_past(request.selector)?;
        let target_selector = match request.target_selector {
            Some(selector) => convert::selector_of_past(Some(selector))?,
            None => base_selector.clone(),
        };
        let (base_start, base_end) = self
            .past_window(base.start_unix_nanos, base.end_unix_nanos)
            .await?;
        let (target_start, target_end) = self
            .past_window(target.start_unix_nanos, target.end_unix_nanos)
            .await?;
        let sight = Sight::of(caller);
        let kind = SampleKind::CpuClock;
        let queries = [
            self.query(base_start, base_end, base_selector, kind, sight),
            self.query(target_start, target_end, target_selector, kind, sight),
        ];
        let limit = match request.limit {
            0 => DEFAULT_LIMIT,
            limit => limit as usize,
        };
        let drawing = match request.options {
            None => None,
            Some(options) => {
                let options = ReportOptions::try_from(Some(options))?;
                let format = match options.format {
                    crate::profile::Format::Pprof => report::DiffFormat::Pprof,
                    crate::profile::Format::Flamegraph => report::DiffFormat::Flamegraph,
                    other => {
                        return Err(ApiError::invalid(format!(
                            "a diff is drawn as pprof or flamegraph, not {}; leave options \
                             unset for the table only",
                            convert::format_name(other)
                        )));
                    }
                };
                Some((format, options))
            }
        };
        let (normalize, max_response_bytes) = (request.normalize, self.limits.max_response_bytes);
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let [base, target] = queries.map(|query| {
                let mut profile = crate::read_lock(&store).profile(&query);
                if !sight.kernel_addresses {
                    profile.hide_kernel_addresses();
                }
                profile
            });
            let report = match drawing {
                None => Vec::new(),
                Some((format, options)) => {
                    let report = report::render_diff(&base, &target, format, &options, normalize)
                        .map_err(|err| {
                        ApiError::Internal(format!("cannot draw the diff: {err}"))
                    })?;
                    limits::check_reply_size(report.len(), max_response_bytes)?;
                    report
                }
            };
            let changes = report::diff(&base, &target);
            Ok(v1::DiffReply {
                text: report::diff_text(&base, &target, &changes, limit),
                changes: changes
                    .into_iter()
                    .map(|change| v1::FunctionChange {
                        function: change.function.to_string(),
                        base_self_percent: change.base_self,
                        target_self_percent: change.target_self,
                        base_total_percent: change.base_total,
                        target_total_percent: change.target_total,
                    })
                    .collect(),
                base: Some(convert::summary(&base)),
                target: Some(convert::summary(&target)),
                report,
            })
        })
        .await
        .map_err(|err| ApiError::Internal(format!("the diff task failed: {err}")))?
    }
}
