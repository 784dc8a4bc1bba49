import Hummingbird
import NIOCore
import OpenAPIRuntime

/// Turns what goes wrong in the server API into an answer in the API's own error shape
/// (`{"error": code, "message": text}`, docs/openapi.yaml): a request the generated code
/// cannot read (a body that is not the schema's JSON, a wrong content type) is the 4xx
/// swift-openapi-runtime names; a body over ``maxBodyBytes`` is 413; anything else is 500,
/// logged with the error and answered without it.
struct APIErrorMiddleware: RouterMiddleware {
    typealias Context = GatewayRequestContext

    /// The largest request body read: room for the longest text the API takes (65,536
    /// characters) even if every one is written as a JSON escape pair.
    static let maxBodyBytes = 1024 * 1024

    func handle(
        _ request: Request, context: GatewayRequestContext, next: (Request, GatewayRequestContext) async throws -> Response
    ) async throws -> Response {
        var request = request
        do {
            let body = try await request.collectBody(upTo: Self.maxBodyBytes)
            if body.readableBytes == 0 && request.method == .post {
                // No body is an empty object (the generated code would fail on zero bytes of
                // JSON): the same for an operation whose body is optional, a 400 naming the
                // missing fields for one whose body is required.
                var head = request.head
                head.headerFields[.contentType] = "application/json"
                request = Request(head: head, body: RequestBody(buffer: ByteBuffer(string: "{}")))
            }
        } catch let error as any HTTPResponseError where error.status == .contentTooLarge {
            return .error(.contentTooLarge, "body_too_large", "the request body is over \(Self.maxBodyBytes) bytes")
        }
        do {
            return try await next(request, context)
        } catch let error as ServerError where error.httpStatus.code < 500 {
            let code = error.httpStatus == .unsupportedMediaType ? "unsupported_media_type" : "bad_request"
            return .error(error.httpStatus, code, "\(error.causeDescription): \(error.underlyingError)")
        } catch let error as any HTTPResponseError where error.status == .notFound {
            // Hummingbird's router says 404 for a method a path does not take, too.
            guard let allowed = Self.methods(of: request.uri.path) else {
                return .error(.notFound, "not_found", "no such operation: docs/openapi.yaml lists them")
            }
            var response = Response.error(.methodNotAllowed, "method_not_allowed", "\(request.method) \(request.uri.path): only \(allowed)")
            response.headers[.allow] = allowed
            return response
        } catch let error as any HTTPResponseError where error.status.code < 500 {
            return .error(error.status, "bad_request", error.status.reasonPhrase)
        } catch {
            context.logger.error("API request failed", metadata: ["method": "\(request.method)", "path": "\(request.uri.path)", "error": "\(error)"])
            return .error(.internalServerError, "internal_error", "the gateway could not handle the request; it is in the gateway's log")
        }
    }

    /// The methods the API takes on `path`, if it is one of its paths.
    static func methods(of path: String) -> String? {
        if path == "/v1/stats" { return "GET" }
        let levels = path.split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count == 5, levels[0].isEmpty, levels[1] == "v1", levels[2] == "users", !levels[3].isEmpty else { return nil }
        switch levels[4] {
        case "messages": return "POST"
        case "presence": return "GET"
        default: return nil
        }
    }
}
