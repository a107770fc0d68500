"""Write-back: the cache configuration of a run and sending it to the device with ztbp-ctl."""
