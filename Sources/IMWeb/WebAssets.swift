/// The files imgw serves to browsers, compiled into the binary (SwiftPM's `embedInCode`), so
/// that an installed `imgw` needs nothing beside it: the JavaScript client library
/// (docs/JAVASCRIPT.md), the web chat page of `listen.websocket.development`, and the operator
/// console of the server API listener.
public enum WebAssets {
    /// One file: its bytes and its `Content-Type`.
    public struct Asset: Sendable {
        /// The file's name, as in `Sources/IMWeb/Resources`.
        public let name: String
        /// The `Content-Type` to serve it with.
        public let contentType: String
        /// The file's bytes.
        public let bytes: [UInt8]

        /// An asset: for one served with changes (the chat page with its listener's path).
        public init(name: String, contentType: String, bytes: [UInt8]) {
            self.name = name
            self.contentType = contentType
            self.bytes = bytes
        }
    }

    /// The JavaScript client library, an ES module.
    public static let client = Asset(name: "imclient.js", contentType: javaScript, bytes: PackageResources.imclient_js)
    /// The web chat page and its script and style.
    public static let chatPage = Asset(name: "chat.html", contentType: html, bytes: PackageResources.chat_html)
    public static let chatScript = Asset(name: "chat.js", contentType: javaScript, bytes: PackageResources.chat_js)
    public static let chatStyle = Asset(name: "chat.css", contentType: css, bytes: PackageResources.chat_css)
    /// The operator console and its script and style.
    public static let consolePage = Asset(name: "console.html", contentType: html, bytes: PackageResources.console_html)
    public static let consoleScript = Asset(name: "console.js", contentType: javaScript, bytes: PackageResources.console_js)
    public static let consoleStyle = Asset(name: "console.css", contentType: css, bytes: PackageResources.console_css)

    /// Every asset.
    public static var all: [Asset] { [client, chatPage, chatScript, chatStyle, consolePage, consoleScript, consoleStyle] }

    private static let javaScript = "text/javascript; charset=utf-8"
    private static let html = "text/html; charset=utf-8"
    private static let css = "text/css; charset=utf-8"
}
