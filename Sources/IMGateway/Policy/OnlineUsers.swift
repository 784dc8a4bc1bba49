/// Which users have at least one device online, from the retained presence of every device
/// (`{prefix}/u/+/presence/+`). Only online devices are kept: the memory grows with the users
/// online, not with every user who ever logged in.
struct OnlineUsers: Sendable {
    private var devices: [String: [String]] = [:]

    /// Takes one device's presence: online, or offline (also for a cleared presence).
    mutating func apply(user: String, device: String, online: Bool) {
        var list = devices[user] ?? []
        if online {
            guard !list.contains(device) else { return }
            list.append(device)
        } else {
            guard let index = list.firstIndex(of: device) else { return }
            list.remove(at: index)
        }
        devices[user] = list.isEmpty ? nil : list
    }

    /// Whether a device of `user` is online.
    func isOnline(_ user: String) -> Bool { devices[user] != nil }

    /// How many users have a device online.
    var count: Int { devices.count }
}
