import Foundation
import HTTPTypes
import OpenAPIRuntime

/// A client middleware that sends an API key the way the server API takes it:
/// `Authorization: Bearer KEY` on every request.
public struct BearerKey: ClientMiddleware {
    /// The key (one of the gateway's `api.keys`).
    public let key: String

    /// A middleware that sends `key`.
    public init(key: String) {
        self.key = key
    }

    public func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        request.headerFields[.authorization] = "Bearer \(key)"
        return try await next(request, body, baseURL)
    }
}
