//! Build script: the WDK binary configuration exists only with the `wdk` feature, on a
//! Windows host with the WDK installed (windows-drivers-rs cannot build anywhere else).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "wdk")]
    {
        wdk_build::configure_wdk_binary_build()?;
        // NDIS exports (NdisMRegisterMiniportDriver, ...); wdk-build already searches
        // Lib\<sdk>\km\x64, which holds ndis.lib.
        println!("cargo::rustc-link-lib=ndis");
    }
    Ok(())
}
