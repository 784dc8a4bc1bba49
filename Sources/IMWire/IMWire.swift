public enum IMWire {}
