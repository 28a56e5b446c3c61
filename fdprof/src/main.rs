fn main() -> std::process::ExitCode {
    fdprof::cli::main()
}
