fn main() -> std::process::ExitCode {
    fdprof::commands::main()
}
