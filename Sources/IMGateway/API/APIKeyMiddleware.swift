import Crypto
import Hummingbird
import Logging

/// Lets a request through only with one of the configured API keys as its bearer token
/// (`Authorization: Bearer KEY`), and puts the key's name, never the key, into the request's
/// log metadata and context. Anything else gets 401 with a body that says only what is
/// needed, whatever was wrong (no header, another scheme, an unknown key).
///
/// Keys are compared as SHA-256 digests, every configured key each time, so that neither the
/// time taken nor an early exit tells how much of a key matched or which key was close.
struct APIKeyMiddleware: RouterMiddleware {
    typealias Context = GatewayRequestContext

    private struct Entry: Sendable {
        let name: String
        let digest: [UInt8]
    }

    private let entries: [Entry]
    /// Paths a GET (or HEAD) needs no key for: the operator console's files.
    private let open: Set<String>

    init(keys: [GatewayConfiguration.APIKey], open: Set<String> = []) {
        entries = keys.map { Entry(name: $0.name, digest: Self.digest($0.key)) }
        self.open = open
    }

    func handle(
        _ request: Request, context: GatewayRequestContext, next: (Request, GatewayRequestContext) async throws -> Response
    ) async throws -> Response {
        if request.method == .get || request.method == .head, open.contains(request.uri.path) {
            return try await next(request, context)
        }
        guard let name = caller(of: request) else {
            context.logger.notice(
                "API request refused: no valid key",
                metadata: ["method": "\(request.method)", "path": "\(request.uri.path)"])
            var response = Response.error(.unauthorized, "unauthorized", "a valid API key is required: Authorization: Bearer KEY")
            response.headers[.wwwAuthenticate] = "Bearer"
            return response
        }
        var context = context
        context.apiKeyName = name
        context.logger[metadataKey: "api_key"] = "\(name)"
        return try await Self.$caller.withValue(name) { try await next(request, context) }
    }

    /// The name of the key of the request being handled (for the operations' log lines,
    /// which the generated code calls without the request context).
    @TaskLocal static var caller: String?

    /// The name of the key `request` carries, if it is one of ours.
    private func caller(of request: Request) -> String? {
        guard let header = request.headers[.authorization] else { return nil }
        let scheme = "bearer "
        guard header.utf8.count > scheme.utf8.count, header.prefix(scheme.count).lowercased() == scheme else { return nil }
        let presented = Self.digest(String(header.dropFirst(scheme.count)))
        var found: String?
        for entry in entries {
            var difference: UInt8 = 0
            for index in 0..<presented.count { difference |= presented[index] ^ entry.digest[index] }
            if difference == 0 { found = entry.name }
        }
        return found
    }

    private static func digest(_ key: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(key.utf8)))
    }
}
