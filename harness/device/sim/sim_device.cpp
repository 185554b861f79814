// placeholder: the sim backend lands here.
