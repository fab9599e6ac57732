//! Diff: two past windows (or two selectors) read as the asker may see
//! them, compared function by function (all of them, or those named, as
//! every function a person names is matched), and drawn when asked.

use profilerd_words::FunctionName;

use crate::profile::ProfileMode;

use super::{
    PastWindow, Service, ServiceError,
    access::Window,
    answers::{self, Sight, Summary},
    limits,
    selection::{self, SelectorSpec},
};
use crate::{
    profile::{Format, ReportOptions},
    report,
    store::SumBy,
};

/// Rows of the text table unless the request says otherwise.
const DEFAULT_LIMIT: usize = 50;

/// What a Diff compares.
#[derive(Clone, Debug)]
pub struct DiffSpec {
    pub base: PastWindow,
    pub target: PastWindow,
    /// Selects both windows' samples, unless `target_selector` is set.
    pub selector: SelectorSpec,
    pub target_selector: Option<SelectorSpec>,
    /// Rows of the text table; `None` for the default.
    pub limit: Option<usize>,
    /// Also draw the difference, as `options.format` says (pprof or a
    /// flame graph).
    pub drawing: Option<ReportOptions>,
    /// Scale the base to the target's samples first.
    pub normalize: bool,
    /// Only the rows of these functions (matched as `callers` matches its
    /// function); every function's when empty.
    pub functions: Vec<String>,
}

/// How a diff is drawn.
pub type DiffDrawing = report::DiffFormat;

/// The two windows compared.
#[derive(Clone, Debug)]
pub struct DiffResult {
    /// The largest change of the self share first.
    pub changes: Vec<report::FunctionChange>,
    pub text: String,
    pub base: Summary,
    pub target: Summary,
    /// The drawing asked for (gzipped pprof or SVG), or nothing.
    pub drawing: Vec<u8>,
}

impl Service {
    pub async fn diff(
        &self,
        asker: super::access::Asker,
        spec: DiffSpec,
    ) -> Result<DiffResult, ServiceError> {
        self.check_selector(asker, &spec.selector, Window::Past)?;
        if let Some(target) = &spec.target_selector {
            self.check_selector(asker, target, Window::Past)?;
        }
        let functions = (spec.functions.into_iter())
            .map(selection::function_name)
            .collect::<Result<Vec<String>, _>>()?;
        let base_selector = spec.selector.clone().past()?;
        let target_selector = match spec.target_selector {
            Some(selector) => selector.past()?,
            None => base_selector.clone(),
        };
        let drawing = match spec.drawing {
            None => None,
            Some(options) => {
                selection::check_report_options(&options)?;
                let format = match options.format {
                    Format::Pprof => DiffDrawing::Pprof,
                    Format::Flamegraph => DiffDrawing::Flamegraph,
                    other => {
                        return Err(ServiceError::invalid(format!(
                            "a diff is drawn as pprof or flamegraph, not {}; leave the drawing \
                             out for the table only",
                            other.name()
                        )));
                    }
                };
                Some((format, options))
            }
        };
        let (base_start, base_end) = self.past_window(spec.base).await?;
        let (target_start, target_end) = self.past_window(spec.target).await?;
        let sight = Sight::of(asker.caller);
        let mode = ProfileMode::Cpu;
        let queries = [
            self.query_of(base_start, base_end, base_selector, mode, sight),
            self.query_of(target_start, target_end, target_selector, mode, sight),
        ];
        let limit = spec.limit.unwrap_or(DEFAULT_LIMIT);
        let (normalize, max_response_bytes) = (spec.normalize, self.limits.max_response_bytes);
        let store = self.store.clone();
        let retention = self.store_stats().retention;
        self.report_gate
            .run(move || {
                let [mut base, mut target] = queries.map(|query| {
                    answers::window_profile(
                        &store,
                        &query,
                        sight.kernel_addresses,
                        SumBy::ThreadAndStack,
                    )
                });
                // Said of each window whose held samples begin later than
                // asked.
                for (which, asked, profile) in [
                    ("the base window", base_start, &mut base),
                    ("the target window", target_start, &mut target),
                ] {
                    let covered = Some(profile.start);
                    profile
                        .warnings
                        .extend(super::windows::shortfall(which, asked, covered, retention));
                }
                let drawing = match drawing {
                    None => Vec::new(),
                    Some((format, options)) => {
                        let drawing =
                            report::render_diff(&base, &target, format, &options, normalize)
                                .map_err(|err| {
                                    ServiceError::Internal(format!("cannot draw the diff: {err}"))
                                })?;
                        limits::check_reply_size(drawing.len(), max_response_bytes)?;
                        drawing
                    }
                };
                let named: Vec<FunctionName> = functions
                    .iter()
                    .map(|name| FunctionName::new(name))
                    .collect();
                let changes = report::diff(&base, &target, &named);
                Ok(DiffResult {
                    text: report::diff_text(&base, &target, &changes, limit, &named),
                    changes,
                    base: Summary::of(&base),
                    target: Summary::of(&target),
                    drawing,
                })
            })
            .await?
    }
}
