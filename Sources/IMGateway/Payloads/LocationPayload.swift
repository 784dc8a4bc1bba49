import IMWire

/// A position fix on `{prefix}/u/{user}/location`, in the OwnTracks location format plus the
/// sharing user and device. QoS 0; the last one retained with the share's remaining time as
/// message expiry.
///
/// ```json
/// {"_type":"location","acc":12,"device":"phone-1","lat":52.520008,"lon":13.404954,"tst":1735689590,"user":"alice"}
/// ```
public struct LocationPayload: Codable, Hashable, Sendable {
    /// The OwnTracks message type; always `location`.
    public var type: String
    /// Latitude, degrees.
    public var lat: Double
    /// Longitude, degrees.
    public var lon: Double
    /// Accuracy radius, metres.
    public var acc: UInt32?
    /// Time of the fix, Unix seconds.
    public var tst: UInt64
    /// Altitude, metres.
    public var alt: Int32?
    /// Velocity, km/h.
    public var vel: UInt16?
    /// Course over ground, degrees 0–359.
    public var cog: UInt16?
    /// Battery, percent 0–100.
    public var batt: UInt8?
    /// The sharing user.
    public var user: String
    /// The device that sent the fix.
    public var device: String?

    enum CodingKeys: String, CodingKey {
        case type = "_type"
        case lat, lon, acc, tst, alt, vel, cog, batt, user, device
    }

    /// The OwnTracks `_type` of a location message.
    public static let locationType = "location"

    /// The payload for a fix sent by `user`'s `device`.
    public init(location: IMLocation, user: String, device: String? = nil) {
        self.type = Self.locationType
        self.lat = location.lat
        self.lon = location.lon
        self.acc = location.acc
        self.tst = location.tst
        self.alt = location.alt
        self.vel = location.vel
        self.cog = location.cog
        self.batt = location.batt
        self.user = user
        self.device = device
    }

    /// The payload for a LOCATION_UPDATE from `user`'s `device`.
    public init(update: LocationUpdate, user: String, device: String? = nil) {
        self.init(location: update.location, user: user, device: device)
    }

    /// Decodes a payload; another OwnTracks `_type` (e.g. `transition`) is refused.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.type = try container.decode(String.self, forKey: .type)
        guard self.type == Self.locationType else { throw PayloadError.invalidField("_type", value: self.type) }
        self.lat = try container.decode(Double.self, forKey: .lat)
        self.lon = try container.decode(Double.self, forKey: .lon)
        self.acc = try container.decodeIfPresent(UInt32.self, forKey: .acc)
        self.tst = try container.decode(UInt64.self, forKey: .tst)
        self.alt = try container.decodeIfPresent(Int32.self, forKey: .alt)
        self.vel = try container.decodeIfPresent(UInt16.self, forKey: .vel)
        self.cog = try container.decodeIfPresent(UInt16.self, forKey: .cog)
        self.batt = try container.decodeIfPresent(UInt8.self, forKey: .batt)
        self.user = try container.decode(String.self, forKey: .user)
        self.device = try container.decodeIfPresent(String.self, forKey: .device)
    }

    /// The fix, with ranges checked as IMWire checks them.
    public func location() throws(PayloadError) -> IMLocation {
        guard (-90.0...90.0).contains(self.lat) else { throw .invalidField("lat", value: "\(self.lat)") }
        guard (-180.0...180.0).contains(self.lon) else { throw .invalidField("lon", value: "\(self.lon)") }
        if let cog, cog > 359 { throw .invalidField("cog", value: "\(cog)") }
        if let batt, batt > 100 { throw .invalidField("batt", value: "\(batt)") }
        return IMLocation(
            lat: self.lat, lon: self.lon, tst: self.tst, acc: self.acc, alt: self.alt, vel: self.vel, cog: self.cog,
            batt: self.batt)
    }

    /// The LOCATION notice for a watcher; checks ids and ranges.
    public func notice() throws(PayloadError) -> LocationNotice {
        guard IMIdentifier.isValid(self.user) else { throw .invalidField("user", value: self.user) }
        if let device, !IMIdentifier.isValid(device) { throw .invalidField("device", value: device) }
        return LocationNotice(user: self.user, device: self.device, location: try self.location())
    }
}
