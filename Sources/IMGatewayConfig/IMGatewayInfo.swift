/// The gateway: TLV clients on one side, one MQTT v5 session per device on the other.
public enum IMGatewayInfo {
    /// The version imgw reports.
    public static let version = "0.1.0"
}
