/// Which users have at least one device online, from the retained presence of every device
/// (`{prefix}/u/+/presence/+`). Only online devices are kept: the memory grows with the users
/// online, not with every user who ever logged in. Most users have one device online, which
/// takes no allocation beyond the user's entry.
struct OnlineUsers: Sendable {
    private enum Devices: Sendable {
        case one(String)
        case several([String])
    }

    private var users: [String: Devices] = [:]

    /// Takes one device's presence: online, or offline (also for a cleared presence).
    mutating func apply(user: String, device: String, online: Bool) {
        switch (users[user], online) {
        case (nil, true):
            users[user] = .one(device)
        case (nil, false):
            break
        case (.one(let present)?, true):
            if present != device { users[user] = .several([present, device]) }
        case (.one(let present)?, false):
            if present == device { users[user] = nil }
        case (.several(var devices)?, true):
            guard !devices.contains(device) else { return }
            devices.append(device)
            users[user] = .several(devices)
        case (.several(var devices)?, false):
            guard let index = devices.firstIndex(of: device) else { return }
            devices.remove(at: index)
            users[user] = devices.count == 1 ? .one(devices[0]) : .several(devices)
        }
    }

    /// Whether a device of `user` is online.
    func isOnline(_ user: String) -> Bool { users[user] != nil }

    /// How many users have a device online.
    var count: Int { users.count }
}
