/// The retained membership of one user in one group, on `{prefix}/g/{group}/members/{user}`;
/// removing the member clears it (an empty retained message).
///
/// ```json
/// {"group":"team","since":1735689600123,"user":"bob"}
/// ```
public struct GroupMemberPayload: Codable, Hashable, Sendable {
    /// The group.
    public var group: String
    /// The member.
    public var user: String
    /// When the member was added, Unix milliseconds.
    public var since: UInt64

    /// Creates a membership.
    public init(group: String, user: String, since: UInt64) {
        self.group = group
        self.user = user
        self.since = since
    }
}
