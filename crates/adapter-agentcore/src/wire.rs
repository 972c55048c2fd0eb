//! The AgentCore Code Interpreter wire shapes this adapter reads and writes.
//!
//! The types themselves are the SDK's (`aws-sdk-bedrockagentcore` parses the event stream and the
//! JSON); this module names the tools and arguments as the service spells them, and folds the
//! `result` events of one invocation into one [`ToolResult`].
//!
//! A `result` event (`CodeInterpreterResult`) is MCP's `CallToolResult`:
//! `{content: [ContentBlock], structuredContent?: {taskId, taskStatus, stdout, stderr, exitCode,
//! executionTime}, isError?}`. `executionTime` is documented in milliseconds but observed in
//! seconds; it is kept raw and never interpreted.

use aws_sdk_bedrockagentcore::types::{
    CodeInterpreterResult, ContentBlock, ContentBlockType, ResourceContent, ToolName,
};

/// The tools this adapter calls, by the service's names.
pub(crate) mod tool {
    use super::ToolName;

    /// Runs a shell command string and returns its result.
    pub(crate) fn execute_command() -> ToolName {
        ToolName::ExecuteCommand
    }
    /// Starts a shell command string as a task: `structuredContent.taskId`.
    pub(crate) fn start_command_execution() -> ToolName {
        ToolName::StartCommandExecution
    }
    /// A task's status (`submitted | working | completed | canceled | failed`) and, once it ended,
    /// its exit code and output.
    pub(crate) fn get_task() -> ToolName {
        ToolName::GetTask
    }
    /// Cancels a task.
    pub(crate) fn stop_task() -> ToolName {
        ToolName::StopTask
    }
    /// `{content: [{path, text | blob}]}`.
    pub(crate) fn write_files() -> ToolName {
        ToolName::WriteFiles
    }
    /// `{paths: [...]}`: `resource` blocks.
    pub(crate) fn read_files() -> ToolName {
        ToolName::ReadFiles
    }
    /// `{directoryPath}`: `resource_link` blocks.
    pub(crate) fn list_files() -> ToolName {
        ToolName::ListFiles
    }
    /// `{paths: [...]}`.
    pub(crate) fn remove_files() -> ToolName {
        ToolName::RemoveFiles
    }
}

/// `TaskStatus`, spelled as the service spells it (`canceled` with one l).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TaskStatus {
    Submitted,
    Working,
    Completed,
    Canceled,
    Failed,
    Other(String),
}

impl TaskStatus {
    pub(crate) fn parse(s: &str) -> TaskStatus {
        match s {
            "submitted" => TaskStatus::Submitted,
            "working" => TaskStatus::Working,
            "completed" => TaskStatus::Completed,
            "canceled" => TaskStatus::Canceled,
            "failed" => TaskStatus::Failed,
            other => TaskStatus::Other(other.to_owned()),
        }
    }

    /// True while the task may still produce a result.
    pub(crate) fn is_running(&self) -> bool {
        matches!(self, TaskStatus::Submitted | TaskStatus::Working)
    }
}

/// Everything the `result` events of one invocation said.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ToolResult {
    /// How many `result` events arrived.
    pub(crate) events: usize,
    /// `isError` of any event.
    pub(crate) is_error: bool,
    /// The `structuredContent.stdout` pieces, concatenated.
    pub(crate) stdout: Option<String>,
    /// The `structuredContent.stderr` pieces, concatenated.
    pub(crate) stderr: Option<String>,
    /// Every `structuredContent.exitCode` seen (more than one is a protocol error for a command).
    pub(crate) exit_codes: Vec<i32>,
    /// `structuredContent.taskId`.
    pub(crate) task_id: Option<String>,
    /// `structuredContent.taskStatus` (the last one).
    pub(crate) task_status: Option<String>,
    /// `structuredContent.executionTime`, raw (the unit is not reliable).
    pub(crate) execution_time: Option<f64>,
    /// The text of the `text` content blocks, joined by newlines (for messages).
    pub(crate) text: String,
    /// The content blocks of every event, in order.
    pub(crate) content: Vec<ContentBlock>,
}

impl ToolResult {
    /// About how many bytes the result holds so far.
    pub(crate) fn size(&self) -> usize {
        self.stdout.as_ref().map_or(0, String::len)
            + self.stderr.as_ref().map_or(0, String::len)
            + self.text.len()
    }

    /// Folds one `result` event in.
    pub(crate) fn push(&mut self, r: CodeInterpreterResult) {
        self.events += 1;
        self.is_error |= r.is_error().unwrap_or(false);
        if let Some(sc) = r.structured_content() {
            if let Some(s) = sc.stdout() {
                self.stdout.get_or_insert_with(String::new).push_str(s);
            }
            if let Some(s) = sc.stderr() {
                self.stderr.get_or_insert_with(String::new).push_str(s);
            }
            if let Some(c) = sc.exit_code() {
                self.exit_codes.push(c);
            }
            if let Some(t) = sc.task_id() {
                self.task_id = Some(t.to_owned());
            }
            if let Some(s) = sc.task_status() {
                self.task_status = Some(s.as_str().to_owned());
            }
            if let Some(t) = sc.execution_time() {
                self.execution_time = Some(t);
            }
        }
        for block in r.content() {
            if block.r#type() == &ContentBlockType::Text
                && let Some(t) = block.text()
            {
                if !self.text.is_empty() {
                    self.text.push('\n');
                }
                self.text.push_str(t);
            }
        }
        self.content.extend(r.content);
    }

    /// The task status, if one was reported.
    pub(crate) fn status(&self) -> Option<TaskStatus> {
        self.task_status.as_deref().map(TaskStatus::parse)
    }

    /// A short message for errors: the text content, or a placeholder.
    pub(crate) fn message(&self) -> String {
        let t = self.text.trim();
        if t.is_empty() {
            "(the tool reported an error without a message)".to_owned()
        } else if t.len() > 2000 {
            let mut end = 2000;
            while !t.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}…", &t[..end])
        } else {
            t.to_owned()
        }
    }
}

/// A file read through `readFiles`: the `resource` block of one path.
pub(crate) fn resource_bytes(resource: &ResourceContent) -> Option<Vec<u8>> {
    if let Some(blob) = resource.blob() {
        return Some(blob.as_ref().to_vec());
    }
    resource.text().map(|t| t.as_bytes().to_vec())
}

/// The path a `file://` URI names (the service writes `file:///<path as given>`).
pub(crate) fn uri_path(uri: &str) -> Option<&str> {
    uri.strip_prefix("file://")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_bedrockagentcore::types::{
        TaskStatus as SdkTaskStatus, ToolResultStructuredContent,
    };

    fn result(stdout: &str, exit: Option<i32>, is_error: bool) -> CodeInterpreterResult {
        let mut sc = ToolResultStructuredContent::builder()
            .stdout(stdout)
            .stderr("e")
            .execution_time(0.004);
        if let Some(c) = exit {
            sc = sc.exit_code(c);
        }
        CodeInterpreterResult::builder()
            .content(
                ContentBlock::builder()
                    .r#type(ContentBlockType::Text)
                    .text(stdout)
                    .build()
                    .unwrap(),
            )
            .structured_content(sc.build())
            .is_error(is_error)
            .build()
            .unwrap()
    }

    #[test]
    fn results_aggregate_in_order() {
        let mut t = ToolResult::default();
        t.push(result("a", None, false));
        t.push(result("b", Some(3), true));
        assert_eq!(t.events, 2);
        assert_eq!(t.stdout.as_deref(), Some("ab"));
        assert_eq!(t.stderr.as_deref(), Some("ee"));
        assert_eq!(t.exit_codes, vec![3]);
        assert!(t.is_error);
        assert_eq!(t.text, "a\nb");
    }

    #[test]
    fn task_statuses_match_the_enum() {
        let r = CodeInterpreterResult::builder()
            .set_content(Some(vec![]))
            .structured_content(
                ToolResultStructuredContent::builder()
                    .task_id("t-1")
                    .task_status(SdkTaskStatus::Canceled)
                    .build(),
            )
            .build()
            .unwrap();
        let mut t = ToolResult::default();
        t.push(r);
        assert_eq!(t.status(), Some(TaskStatus::Canceled));
        assert_eq!(t.task_id.as_deref(), Some("t-1"));
        assert!(!TaskStatus::parse("cancelled").is_running());
        assert_eq!(
            TaskStatus::parse("cancelled"),
            TaskStatus::Other("cancelled".into())
        );
        assert!(TaskStatus::parse("working").is_running());
    }

    #[test]
    fn uris_name_paths() {
        assert_eq!(uri_path("file:///data.txt"), Some("/data.txt"));
        assert_eq!(uri_path("s3://x"), None);
    }
}
