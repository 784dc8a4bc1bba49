/// A position fix, with OwnTracks field names: `lat`, `lon`, `acc`, `tst`, `alt`, `vel`, `cog`, `batt`.
public struct IMLocation: Hashable, Sendable {
    /// Latitude in degrees, -90...90 (LAT, f64).
    public var lat: Double
    /// Longitude in degrees, -180...180 (LON, f64).
    public var lon: Double
    /// Time of the fix, Unix seconds (TST, u64).
    public var tst: UInt64
    /// Accuracy radius in metres (ACC, u32).
    public var acc: UInt32?
    /// Altitude in metres (ALT, i32).
    public var alt: Int32?
    /// Velocity in km/h (VEL, u16).
    public var vel: UInt16?
    /// Course over ground in degrees, 0...359 (COG, u16).
    public var cog: UInt16?
    /// Battery level in percent, 0...100 (BATT, u8).
    public var batt: UInt8?

    /// Creates a fix.
    public init(
        lat: Double,
        lon: Double,
        tst: UInt64,
        acc: UInt32? = nil,
        alt: Int32? = nil,
        vel: UInt16? = nil,
        cog: UInt16? = nil,
        batt: UInt8? = nil
    ) {
        self.lat = lat
        self.lon = lon
        self.tst = tst
        self.acc = acc
        self.alt = alt
        self.vel = vel
        self.cog = cog
        self.batt = batt
    }

    init(fields: TLVFields) throws(IMWireError) {
        self.lat = try fields.required(.latitude).double()
        self.lon = try fields.required(.longitude).double()
        guard (-90.0...90.0).contains(self.lat) else { throw .invalidField(.latitude, .valueOutOfRange("\(self.lat)")) }
        guard (-180.0...180.0).contains(self.lon) else {
            throw .invalidField(.longitude, .valueOutOfRange("\(self.lon)"))
        }
        self.tst = try fields.integer(.locationTime)
        self.acc = try fields.optionalInteger(.accuracy)
        self.alt = try fields.optionalInteger(.altitude)
        self.vel = try fields.optionalInteger(.velocity)
        self.cog = try fields.optionalInteger(.course)
        self.batt = try fields.optionalInteger(.battery)
        if let cog, cog > 359 { throw .invalidField(.course, .valueOutOfRange(String(cog))) }
        if let batt, batt > 100 { throw .invalidField(.battery, .valueOutOfRange(String(batt))) }
    }

    func write(to writer: inout TLVWriter) {
        writer.write(.latitude, double: self.lat)
        writer.write(.longitude, double: self.lon)
        writer.write(.locationTime, integer: self.tst)
        if let acc { writer.write(.accuracy, integer: acc) }
        if let alt { writer.write(.altitude, integer: alt) }
        if let vel { writer.write(.velocity, integer: vel) }
        if let cog { writer.write(.course, integer: cog) }
        if let batt { writer.write(.battery, integer: batt) }
    }
}
