/// Why a benchmark could not run. The message is what the user sees (ArgumentParser prints
/// it and exits non-zero).
struct BenchError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }

    /// The gateway refused a login during setup.
    static func loginRefused(user: String, _ reason: String) -> BenchError {
        BenchError("login of \(user) refused: \(reason)")
    }
}
