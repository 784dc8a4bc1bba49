import IMClient

extension Result where Failure == IMClientError {
    /// The result of an async throwing body.
    init(_ body: () async throws(IMClientError) -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
