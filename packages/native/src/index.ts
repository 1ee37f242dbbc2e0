/**
 * @since 0.1.0
 */
export * as NativeDriver from "./NativeDriver.js"
/**
 * @since 0.1.0
 */
export * as RpmaBinding from "./RpmaBinding.js"
