import IMGatewayConfig

extension GatewayTopics {
    /// A topic or filter as given to `imcli pub` and `imcli sub`: one under the gateway's
    /// topic prefix (`im/...`) is taken as it is (the gateway checks it); any other is put in
    /// the pub/sub space: `news` → `im/t/news`, `rooms/#` → `im/t/rooms/#`.
    func fullName(_ name: String) -> String {
        name.hasPrefix(prefix + "/") ? name : pubsubRoot + name
    }
}
