fn main() -> std::process::ExitCode {
    fdprof::main()
}
