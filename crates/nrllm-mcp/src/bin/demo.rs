//! The demo MCP server as a program of its own (the tests start it over stdio); the playground
//! serves the same with `nrllm-playground mcp-demo`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match nrllm_mcp::demo::serving::main_with_args(&args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("nrllm-mcp-demo: {message}");
            std::process::ExitCode::from(2)
        }
    }
}
