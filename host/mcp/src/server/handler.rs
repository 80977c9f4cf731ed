//! The protocol's side of the server: what it says it is and serves, and each request it
//! answers, dispatched to the calls.

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CustomRequest, CustomResult,
    ErrorCode, GetTaskParams, GetTaskResult, Implementation, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use crate::app;
use crate::tasks::{self};
use crate::tools::{RESUME_WORKFLOW, RUN_WORKFLOW};

use super::Server;
use super::calls::no_input_asked;

impl ServerHandler for Server {
    #[expect(deprecated, reason = "MCP logging is what 2025-11-25 clients show")]
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .enable_tasks()
            .enable_resources()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("flowbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.inner.instructions.clone())
    }

    /// Every revision up to the stateless 2026-07-28: clients of 2025-11-25 and before
    /// initialize a session, clients of 2026-07-28 send self-contained requests (and may ask
    /// `server/discover` first).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = match app::supported(context.client_capabilities().as_ref()) {
            true => app::tools(&self.inner.tools),
            false => self.inner.tools.clone(),
        };
        Ok(ListToolsResult::with_all_items(tools))
    }

    /// The run view of MCP Apps, the one resource.
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![app::resource()]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        match request.uri.as_str() {
            app::VIEW_URI => Ok(ReadResourceResponse::Complete(app::read())),
            uri => Err(ErrorData::resource_not_found(
                format!("no resource {uri:?}: the one resource is {}", app::VIEW_URI),
                None,
            )),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _running = self.inner.in_flight.enter();
        let stateless = context
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        let tasks = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        if stateless && tasks && [RUN_WORKFLOW, RESUME_WORKFLOW].contains(&request.name.as_ref()) {
            return self.start_task(request, &context);
        }
        if let Some(rounds) = self.inner.rounds.as_ref().filter(|_| stateless) {
            return self.round_trip(rounds, request, &context).await;
        }
        if request.request_state.is_some() || request.input_responses.is_some() {
            return Err(no_input_asked(&request.name));
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let result = self.call(&request.name, arguments, &context).await?;
        Ok(CallToolResponse::Complete(result))
    }

    /// `tasks/get`: a task held in memory, else what the journal says of its thread.
    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let id = request.task_id;
        let ttl = self.inner.tasks.ttl();
        let task = match self.inner.tasks.get(&id) {
            Some(entry) => entry.detailed(ttl),
            None => tasks::from_journal(&id, self.journaled_task(&id).await?, ttl)?,
        };
        Ok(GetTaskResult::new(task))
    }

    /// `tasks/update`: the answers of an `input_required` task's batch.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = request.task_id;
        match self.inner.tasks.get(&id) {
            Some(entry) => entry.update(&request.input_responses),
            None => Err(self.not_running(&id, "tasks/update").await),
        }
    }

    /// `tasks/cancel`: cancels a running task; its thread stays resumable.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = request.task_id;
        match self.inner.tasks.get(&id) {
            Some(entry) => entry.cancel(),
            None => Err(self.not_running(&id, "tasks/cancel").await),
        }
    }

    #[expect(deprecated, reason = "MCP logging is what 2025-11-25 clients show")]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.level.set(request.level);
        Ok(())
    }

    /// A request rmcp could not decode as one it knows: the method is unknown (Method not
    /// found), or it is one this server serves whose params do not fit (Invalid params, saying
    /// what is wrong) — rmcp alone would call both an unknown method.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let CustomRequest { method, params, .. } = request;
        let params = params.unwrap_or(Value::Null);
        let problem = match method.as_str() {
            "tools/call" => serde_json::from_value::<CallToolRequestParams>(params).err(),
            "resources/read" => serde_json::from_value::<ReadResourceRequestParams>(params).err(),
            "initialize" | "ping" | "tools/list" | "resources/list" | "logging/setLevel"
            | "tasks/get" | "tasks/update" | "tasks/cancel" => None,
            _ => {
                return Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "unknown method {method:?}: this server serves initialize, ping, \
                         tools/list, tools/call, resources/list, resources/read (the run view \
                         of MCP Apps), logging/setLevel and (the tasks extension) tasks/get, \
                         tasks/update and tasks/cancel"
                    ),
                    None,
                ));
            }
        };
        let detail = problem.map_or_else(String::new, |error| format!(": {error}"));
        Err(ErrorData::invalid_params(
            format!("invalid params for {method}{detail}"),
            None,
        ))
    }
}
